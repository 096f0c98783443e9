# Copies the region of src/lw.h between the LW_CDEF markers into a Lua module that returns
# { cdef = <declarations>, library = <path of liblwopt.so> }. Run as:
#   cmake -DHEADER=src/lw.h -DOUT=cdef.lua -DLIBRARY=/path/liblwopt.so -P gen_cdef.cmake
file(READ "${HEADER}" text)
set(begin_marker "/* LW_CDEF_BEGIN */")
string(FIND "${text}" "${begin_marker}" begin)
string(FIND "${text}" "/* LW_CDEF_END */" end)
if(begin EQUAL -1 OR end EQUAL -1 OR end LESS begin)
    message(FATAL_ERROR "gen_cdef: ${HEADER} lacks the LW_CDEF_BEGIN / LW_CDEF_END markers")
endif()
string(LENGTH "${begin_marker}" marker_length)
math(EXPR begin "${begin} + ${marker_length}")
math(EXPR length "${end} - ${begin}")
string(SUBSTRING "${text}" ${begin} ${length} cdef)
if(cdef MATCHES "\n[ \t]*#")
    message(FATAL_ERROR "gen_cdef: preprocessor line inside the LW_CDEF region of ${HEADER}")
endif()
file(WRITE "${OUT}.tmp" "-- Generated from src/lw.h by cmake/gen_cdef.cmake. Do not edit.\n"
    "return {\n    library = [==[${LIBRARY}]==],\n    cdef = [==[${cdef}]==],\n}\n")
file(RENAME "${OUT}.tmp" "${OUT}")
