# FindNCCL.cmake: where NCCL (nccl.h and libnccl) lives, looked for in this order, the first
# folder that has it winning:
#   1. NCCL_ROOT or NCCL_HOME, as a CMake variable or in the environment (a source build, a
#      cluster module, or the folder of the wheel below given by hand);
#   2. the Python package nvidia.nccl (pip's nvidia-nccl-cu12 / -cu13, which PyTorch brings):
#      include/nccl.h and lib/libnccl.so.2 only, no unversioned libnccl.so: how most people have
#      NCCL. Python is asked where the package is (`python3 -c "import nvidia.nccl"`), with the
#      interpreter on PATH or NCCL_PYTHON;
#   3. the CUDA toolkit's folders and the system's (Debian's libnccl-dev, NVIDIA's packages).
# The library may be libnccl.so or libnccl.so.2 (NAMES_PER_DIR: a folder's versioned library wins
# over an unversioned one found later). Sets NCCL_FOUND, NCCL_INCLUDE_DIR, NCCL_LIBRARY,
# NCCL_VERSION and NCCL_FOUND_IN (which of the three above found it, for the configure line;
# cached with the two paths, so a reconfigure says the same), and the imported
# target NCCL::nccl, whose include folder is a SYSTEM one: nccl.h declares `void
# ncclResetDebugInit();`, which -Wstrict-prototypes -Werror would refuse in our code.
# Before calling: CUDAToolkit_INCLUDE_DIRS / CUDAToolkit_LIBRARY_DIR (find_package(CUDAToolkit)),
# when known, point step 3 at the toolkit.

# Looks in one place unless both are known; keeps nothing half-found (a header from one NCCL
# and a library from another). -DNCCL_INCLUDE_DIR=... -DNCCL_LIBRARY=... given by hand win.
macro(_nccl_look)
    cmake_parse_arguments(_look "DEFAULT_PATHS" "WHERE" "INCLUDE;LIB" ${ARGN})
    if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
        if(_look_DEFAULT_PATHS) # as hints before the system's folders
            find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_look_INCLUDE})
            find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR HINTS ${_look_LIB})
        else()
            find_path(NCCL_INCLUDE_DIR nccl.h PATHS ${_look_INCLUDE} NO_DEFAULT_PATH)
            find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR PATHS ${_look_LIB}
                         NO_DEFAULT_PATH)
        endif()
        if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
            set(NCCL_FOUND_IN "${_look_WHERE}" CACHE INTERNAL "where FindNCCL found NCCL")
        else()
            unset(NCCL_INCLUDE_DIR CACHE)
            unset(NCCL_LIBRARY CACHE)
        endif()
    endif()
endmacro()

if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY AND NOT NCCL_FOUND_IN)
    set(NCCL_FOUND_IN "NCCL_INCLUDE_DIR and NCCL_LIBRARY as given" CACHE INTERNAL "")
endif()

# 1. the folders named by the user
set(_nccl_roots "")
foreach(_var NCCL_ROOT NCCL_HOME)
    if(DEFINED ${_var} AND NOT "${${_var}}" STREQUAL "")
        list(APPEND _nccl_roots "${${_var}}")
    elseif(DEFINED ENV{${_var}} AND NOT "$ENV{${_var}}" STREQUAL "")
        list(APPEND _nccl_roots "$ENV{${_var}}")
    endif()
endforeach()
if(_nccl_roots)
    set(_nccl_inc "")
    set(_nccl_lib "")
    foreach(_root ${_nccl_roots})
        list(APPEND _nccl_inc "${_root}/include")
        list(APPEND _nccl_lib "${_root}/lib" "${_root}/lib64")
    endforeach()
    _nccl_look(WHERE "NCCL_ROOT / NCCL_HOME" INCLUDE ${_nccl_inc} LIB ${_nccl_lib})
endif()

# 2. the Python package
if(NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
    if(NOT NCCL_PYTHON)
        find_program(NCCL_PYTHON NAMES python3 python)
    endif()
    if(NCCL_PYTHON)
        execute_process(
            COMMAND "${NCCL_PYTHON}" -c "import nvidia.nccl as m; print(list(m.__path__)[0])"
            OUTPUT_VARIABLE _nccl_wheel OUTPUT_STRIP_TRAILING_WHITESPACE
            ERROR_QUIET RESULT_VARIABLE _nccl_rc TIMEOUT 30)
        if(_nccl_rc EQUAL 0 AND IS_DIRECTORY "${_nccl_wheel}")
            _nccl_look(WHERE "the Python package nvidia.nccl (${NCCL_PYTHON})"
                       INCLUDE "${_nccl_wheel}/include" LIB "${_nccl_wheel}/lib")
        endif()
    endif()
endif()

# 3. the toolkit and the system
_nccl_look(WHERE "the CUDA toolkit's or the system's folders" DEFAULT_PATHS
           INCLUDE ${CUDAToolkit_INCLUDE_DIRS} LIB ${CUDAToolkit_LIBRARY_DIR})

# The version, from nccl.h's NCCL_MAJOR / NCCL_MINOR / NCCL_PATCH.
set(NCCL_VERSION "")
if(NCCL_INCLUDE_DIR AND EXISTS "${NCCL_INCLUDE_DIR}/nccl.h")
    file(STRINGS "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_defines
         REGEX "^#define NCCL_(MAJOR|MINOR|PATCH)[ \t]+[0-9]+")
    foreach(_part MAJOR MINOR PATCH)
        string(REGEX MATCH "NCCL_${_part}[ \t]+([0-9]+)" _m "${_nccl_defines}")
        set(_nccl_${_part} "${CMAKE_MATCH_1}")
    endforeach()
    if(NOT "${_nccl_MAJOR}" STREQUAL "")
        set(NCCL_VERSION "${_nccl_MAJOR}.${_nccl_MINOR}.${_nccl_PATCH}")
    endif()
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR
                                  VERSION_VAR NCCL_VERSION)
if(NCCL_FOUND AND NOT TARGET NCCL::nccl)
    add_library(NCCL::nccl UNKNOWN IMPORTED)
    set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}")
    # SYSTEM: the compiler takes it with -isystem, and its prototypes' warnings stay quiet
    set_property(TARGET NCCL::nccl APPEND PROPERTY INTERFACE_SYSTEM_INCLUDE_DIRECTORIES
                 "${NCCL_INCLUDE_DIR}")
    set_property(TARGET NCCL::nccl APPEND PROPERTY INTERFACE_INCLUDE_DIRECTORIES
                 "${NCCL_INCLUDE_DIR}")
endif()
