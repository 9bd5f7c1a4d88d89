# The PyTorch reference (reference): its unit tests, and the golden data fixture that the C++
# golden tests consume (FIXTURES_REQUIRED golden).

set(LINSERVE_REFERENCE_DIR ${PROJECT_SOURCE_DIR}/reference)

# Writes ${PROJECT_BINARY_DIR}/golden/{cases.json,case_NN/} (see make_golden.py's docstring).
add_test(NAME golden_data
         COMMAND ${LINSERVE_PYTHON} ${LINSERVE_REFERENCE_DIR}/make_golden.py
                 --out ${PROJECT_BINARY_DIR}/golden)
set_tests_properties(golden_data PROPERTIES FIXTURES_SETUP golden LABELS "python")

# One ctest test per unittest module: reference/tests/test_<name>.py -> reference_<name>.
foreach(name model layers based_layers safetensors export golden convert_fast_transformers
             convert_based sampling training mqar quantize_weights)
  add_test(NAME reference_${name}
           COMMAND ${LINSERVE_PYTHON} ${LINSERVE_REFERENCE_DIR}/tests/test_${name}.py
           WORKING_DIRECTORY ${LINSERVE_REFERENCE_DIR})
  set_tests_properties(reference_${name} PROPERTIES LABELS "python")
endforeach()

# The bundled model (issue 3): size and shape, reproducible tokenizer, the validation loss of the
# slice quoted in its MODEL_CARD.md, and the same text from linserve-generate as from the reference.
add_test(NAME reference_bundled_model
         COMMAND ${LINSERVE_PYTHON} ${LINSERVE_REFERENCE_DIR}/tests/test_bundled_model.py
                 --generate-bin $<TARGET_FILE:linserve-generate>
         WORKING_DIRECTORY ${LINSERVE_REFERENCE_DIR})
set_tests_properties(reference_bundled_model PROPERTIES LABELS "python")

# The bundled Gated DeltaNet model (issue 39): its layers, size and recorded validation loss, and
# the same text from linserve-generate (the C++ gated_delta_net) as from the reference.
add_test(NAME reference_gated_delta_net_model
         COMMAND ${LINSERVE_PYTHON} ${LINSERVE_REFERENCE_DIR}/tests/test_gated_delta_net_model.py
                 --generate-bin $<TARGET_FILE:linserve-generate>
         WORKING_DIRECTORY ${LINSERVE_REFERENCE_DIR})
set_tests_properties(reference_gated_delta_net_model PROPERTIES LABELS "python")

# flash-linear-attention's Gated DeltaNet (issue 39): a random checkpoint in fla's layout converts
# to logits within 1e-12 of a transcription of fla's model, and linserve-generate (the C++ CPU
# backend) writes the text of fla's 64 greedy tokens.
add_test(NAME reference_convert_fla
         COMMAND ${LINSERVE_PYTHON} ${LINSERVE_REFERENCE_DIR}/tests/test_convert_fla.py
                 --generate-bin $<TARGET_FILE:linserve-generate>
         WORKING_DIRECTORY ${LINSERVE_REFERENCE_DIR})
set_tests_properties(reference_convert_fla PROPERTIES LABELS "python")

# Every flash-linear-attention family (issue 39) served end to end: a random checkpoint of each
# converts, a linserve process serves it, and greedy completions over the OpenAI HTTP API and over
# gRPC (linserve-cli) are the text of fla's own greedy tokens.
add_test(NAME reference_fla_serving
         COMMAND ${LINSERVE_PYTHON} ${LINSERVE_REFERENCE_DIR}/tests/test_fla_serving.py
                 --server-bin $<TARGET_FILE:linserve> --cli-bin $<TARGET_FILE:linserve-cli>
         WORKING_DIRECTORY ${LINSERVE_REFERENCE_DIR})
set_tests_properties(reference_fla_serving PROPERTIES LABELS "python")

# The bundled Based model (issue 26): its layers, size and recorded validation loss, and the same
# text from linserve-generate (the C++ Based kinds) as from the reference.
add_test(NAME reference_based_model
         COMMAND ${LINSERVE_PYTHON} ${LINSERVE_REFERENCE_DIR}/tests/test_based_model.py
                 --generate-bin $<TARGET_FILE:linserve-generate>
         WORKING_DIRECTORY ${LINSERVE_REFERENCE_DIR})
set_tests_properties(reference_based_model PROPERTIES LABELS "python")
