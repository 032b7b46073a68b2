# The extension module ampcheck._native (harness/python/native_module.cpp) and, in a package build (scikit-build-core),
# the install rules of the wheel (component python_package): ampcheck/_native*.so and ampcheck/bin/ampcheck.
# pybind11 comes with the torch package (torch/include/pybind11, on LibTorch's include path); Python's headers from
# FindPython for the Python whose torch provides LibTorch. In the build tree the module lands in
# <build>/python/ampcheck/, where the package finds it in a source checkout (python/src/ampcheck/_loader.py).
if(NOT Python_EXECUTABLE)
  set(Python_EXECUTABLE ${AMPCHECK_PYTHON_EXE})
endif()
find_package(Python COMPONENTS Interpreter Development.Module)
if(NOT Python_Development.Module_FOUND)
  message(STATUS "ampcheck: no Python headers for ${Python_EXECUTABLE} (Debian: python3-dev): the extension module "
                 "ampcheck._native is not built")
  return()
endif()
file(MAKE_DIRECTORY ${AMPCHECK_INCLUDE_ROOTS}/python)
file(CREATE_LINK ${PROJECT_SOURCE_DIR}/harness/python ${AMPCHECK_INCLUDE_ROOTS}/python/python SYMBOLIC)
Python_add_library(ampcheck_native MODULE WITH_SOABI harness/python/native_module.cpp)
target_include_directories(ampcheck_native PRIVATE ${AMPCHECK_INCLUDE_ROOTS}/python)
target_link_libraries(ampcheck_native PRIVATE ampcheck_usecases ampcheck_report ampcheck_io)
target_compile_options(ampcheck_native PRIVATE -Wall -Wextra -Wno-unused-parameter)
target_compile_definitions(ampcheck_native PRIVATE AMPCHECK_VERSION="${PROJECT_VERSION}")
ampcheck_use_pch(ampcheck_native)
# the libtorch the module links: the installed torch package's, found beside the module in site-packages, else where
# this build found it
get_filename_component(_ampcheck_torch_lib_dir "${TORCH_LIBRARY}" DIRECTORY)
set_target_properties(ampcheck_native PROPERTIES OUTPUT_NAME _native CXX_VISIBILITY_PRESET hidden
  LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}/python/ampcheck
  INSTALL_RPATH "$ORIGIN/../torch/lib;${_ampcheck_torch_lib_dir}")
message(STATUS "ampcheck: extension module ampcheck._native for ${Python_EXECUTABLE} (${Python_SOABI})")

if(DEFINED SKBUILD)  # a package build: the wheel's contents (a build of the checkout installs nothing of this)
  install(TARGETS ampcheck_native LIBRARY DESTINATION ampcheck COMPONENT python_package)
  set_target_properties(ampcheck PROPERTIES INSTALL_RPATH "$ORIGIN/../../torch/lib;${_ampcheck_torch_lib_dir}")
  install(TARGETS ampcheck RUNTIME DESTINATION ampcheck/bin COMPONENT python_package)
endif()
