# tests/model/format.cmake: config.json, safetensors, weights, model loading, tokenizers.
linserve_test(config_test SOURCES config_test.cc LIBS linserve_model_format)
linserve_test(safetensors_test SOURCES safetensors_test.cc LIBS linserve_model_format)
linserve_test(weights_test SOURCES weights_test.cc LIBS linserve_model_format linserve_testing)
linserve_test(model_test SOURCES model_test.cc LIBS linserve_model linserve_testing_sentencepiece)
linserve_test(tokenizer_test SOURCES tokenizer_test.cc LIBS linserve_model linserve_testing_sentencepiece)
linserve_test(random_model_test SOURCES random_model_test.cc LIBS linserve_testing)
linserve_test(layer_config_test SOURCES layer_config_test.cc LIBS linserve_model_format)
linserve_test(layer_docs_test SOURCES layer_docs_test.cc LIBS linserve_model_layers)
