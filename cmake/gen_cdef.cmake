# Copies the regions of src/lw.h and src/lw_host.h between the LW_CDEF markers, in that order,
# into a Lua module that returns { cdef = <declarations>, library = <path of liblwopt.so> }. Run as:
#   cmake -DHEADER=src/lw.h -DHOST_HEADER=src/lw_host.h -DOUT=cdef.lua
#         -DLIBRARY=/path/liblwopt.so -P gen_cdef.cmake
set(begin_marker "/* LW_CDEF_BEGIN */")
string(LENGTH "${begin_marker}" marker_length)
set(cdef "")
foreach(header "${HEADER}" "${HOST_HEADER}")
    file(READ "${header}" text)
    string(FIND "${text}" "${begin_marker}" begin)
    string(FIND "${text}" "/* LW_CDEF_END */" end)
    if(begin EQUAL -1 OR end EQUAL -1 OR end LESS begin)
        message(FATAL_ERROR "gen_cdef: ${header} lacks the LW_CDEF_BEGIN / LW_CDEF_END markers")
    endif()
    math(EXPR begin "${begin} + ${marker_length}")
    math(EXPR length "${end} - ${begin}")
    string(SUBSTRING "${text}" ${begin} ${length} region)
    if(region MATCHES "\n[ \t]*#")
        message(FATAL_ERROR "gen_cdef: preprocessor line inside the LW_CDEF region of ${header}")
    endif()
    string(APPEND cdef "${region}")
endforeach()
file(WRITE "${OUT}.tmp" "-- Generated from src/lw.h and src/lw_host.h by cmake/gen_cdef.cmake. "
    "Do not edit.\nreturn {\n    library = [==[${LIBRARY}]==],\n    cdef = [==[${cdef}]==],\n}\n")
file(RENAME "${OUT}.tmp" "${OUT}")
