# The layer kinds' source files, from the one list of kinds (model/layers/kind_list.inc): for
# each line LINSERVE_MIXER|NORM|MLP(Name, file), PREFIX + file + SUFFIX. A new kind's line adds
# its declaration (model/layers/<file>.cc) and each backend's implementation
# (model/backend/cpu/cpu_<file>.cc, model/backend/cuda/cuda_<file>.cc) to the build.
set(LINSERVE_KIND_LIST "${PROJECT_SOURCE_DIR}/model/layers/kind_list.inc")
set_property(DIRECTORY "${PROJECT_SOURCE_DIR}" APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
  "${LINSERVE_KIND_LIST}")

function(linserve_kind_sources out prefix suffix)
  file(STRINGS "${LINSERVE_KIND_LIST}" lines REGEX "^[ \t]*LINSERVE_")
  set(sources)
  foreach(line IN LISTS lines)
    if(NOT line MATCHES "^LINSERVE_(MIXER|NORM|MLP)\\([A-Za-z0-9]+, [a-z0-9_]+\\)$")
      message(FATAL_ERROR "${LINSERVE_KIND_LIST}: \"${line}\" is not "
        "LINSERVE_MIXER|NORM|MLP(Name, file) alone on its line")
    endif()
    string(REGEX REPLACE "^LINSERVE_[A-Z]+\\([A-Za-z0-9]+, ([a-z0-9_]+)\\)$" "\\1" file "${line}")
    list(APPEND sources "${prefix}${file}${suffix}")
  endforeach()
  if(NOT sources)
    message(FATAL_ERROR "no kinds in ${LINSERVE_KIND_LIST}")
  endif()
  set(${out} ${sources} PARENT_SCOPE)
endfunction()
