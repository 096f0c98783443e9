-- C.lua: the only module that calls ffi.cdef and ffi.load. The declarations are generated at
-- build time from src/lw.h (lwopt/cdef.lua); C.check turns a failed lw_status into a Lua error.
local ffi = require("ffi")

local found, generated = pcall(require, "lwopt.cdef")
if not found then
   error("lwopt: the generated binding lwopt/cdef.lua is missing; build the library first "
      .. "(make, or cmake -S . -B build && cmake --build build)", 0)
end

ffi.cdef(generated.cdef)

local path = os.getenv("LWOPT_LIB")
if path == nil or path == "" then path = generated.library end
local loaded, lib = pcall(ffi.load, path)
if not loaded then
   error("lwopt: cannot load the library '" .. path .. "' (" .. tostring(lib)
      .. "); build it with make, or point LWOPT_LIB at liblwopt.so", 0)
end

local C = { lib = lib, path = path }

-- The last C error message.
function C.last_error()
   return ffi.string(lib.lw_last_error())
end

-- Raises the last C error, prefixed with the Lua function it surfaced in, when status fails.
function C.check(status, where)
   if status ~= 0 then
      error((where and where .. ": " or "") .. C.last_error(), 0)
   end
end

return C
