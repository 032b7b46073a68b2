# Points CMake at the LibTorch that ships inside the Python torch package, unless Torch_DIR is already set.
# Python: $AMPCHECK_PYTHON, else the Python a package build names (scikit-build-core: Python_EXECUTABLE), else python3.
if(NOT Torch_DIR AND NOT DEFINED ENV{Torch_DIR})
  if(DEFINED ENV{AMPCHECK_PYTHON})
    set(_py $ENV{AMPCHECK_PYTHON})
  elseif(Python_EXECUTABLE)
    set(_py ${Python_EXECUTABLE})
  else()
    find_program(_py NAMES python3 REQUIRED)
  endif()
  execute_process(COMMAND ${_py} -c "import torch; print(torch.utils.cmake_prefix_path)"
    OUTPUT_VARIABLE _torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc ERROR_VARIABLE _torch_error)
  if(NOT _rc EQUAL 0 AND (DEFINED ENV{PYTHONPATH} OR DEFINED ENV{PYTHONNOUSERSITE}))
    # pip's build isolation (a plain `pip install ./python`): the same interpreter with its own site-packages hidden
    # behind PYTHONPATH / PYTHONNOUSERSITE. The torch the package will run with is that interpreter's own: asked
    # without the overlay. (Nothing is downloaded: torch is never a build requirement.)
    execute_process(COMMAND ${CMAKE_COMMAND} -E env --unset=PYTHONPATH --unset=PYTHONNOUSERSITE --unset=PYTHONHOME
                            ${_py} -c "import torch; print(torch.utils.cmake_prefix_path)"
      OUTPUT_VARIABLE _torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _rc)
  endif()
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "ampcheck: could not import torch with ${_py}: ${_torch_error} (also without PYTHONPATH: a pip build "
      "isolation's overlay). HINT: install torch into that Python first (ci/setup.sh: pip install torch==2.11.0), "
      "then `pip install --no-build-isolation ./python`; or set Torch_DIR.")
  endif()
  list(APPEND CMAKE_PREFIX_PATH ${_torch_prefix})
  set(AMPCHECK_PYTHON_EXE ${_py} CACHE FILEPATH "python3 with torch (the oracle for tests)")
else()
  find_program(AMPCHECK_PYTHON_EXE NAMES python3)
endif()
