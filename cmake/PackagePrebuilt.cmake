# AMPCHECK_PREBUILT_DIR: the Python package built from an existing build tree of this checkout — nothing compiled, its
# ampcheck executable and ampcheck._native extension installed into the wheel (component python_package) as a package
# build would install them. The extension must be for the Python building the package (its SOABI in the file name).
if(NOT EXISTS "${AMPCHECK_PREBUILT_DIR}/ampcheck")
  message(FATAL_ERROR "AMPCHECK_PREBUILT_DIR=${AMPCHECK_PREBUILT_DIR}: no ampcheck executable there. HINT: build it "
                      "first (bash ci/build.sh), or leave AMPCHECK_PREBUILT_DIR unset to compile the package's own")
endif()
set(_soabi "${SKBUILD_SOABI}")
if(NOT _soabi)
  set(_soabi "*")
endif()
file(GLOB _ampcheck_native "${AMPCHECK_PREBUILT_DIR}/python/ampcheck/_native.${_soabi}.so")
if(NOT _ampcheck_native)
  message(FATAL_ERROR "AMPCHECK_PREBUILT_DIR=${AMPCHECK_PREBUILT_DIR}: no extension module "
                      "python/ampcheck/_native.${_soabi}.so there (the build found no Python headers, or was configured "
                      "for another Python). HINT: configure that build with this Python (AMPCHECK_PYTHON=python) and "
                      "its headers, or leave AMPCHECK_PREBUILT_DIR unset")
endif()
install(PROGRAMS "${AMPCHECK_PREBUILT_DIR}/ampcheck" DESTINATION ampcheck/bin COMPONENT python_package)
install(FILES ${_ampcheck_native} DESTINATION ampcheck COMPONENT python_package)
message(STATUS "ampcheck: packaging the prebuilt ${AMPCHECK_PREBUILT_DIR}/ampcheck and ${_ampcheck_native}")
