-- C.lua: the only module that calls ffi.cdef and ffi.load. The declarations are generated at
-- build time from src/lw.h (lwopt/cdef.lua); C.check turns a failed lw_status into a Lua error.
local ffi = require("ffi")
local errors = require("lwopt.errors")

local found, generated = pcall(require, "lwopt.cdef")
if not found then
   errors.fail("lwopt", "the library is not built yet (no lwopt/cdef.lua, the binding its build "
      .. "generates): run `make build-lib` in the lwopt tree (or cmake -S . -B build && cmake "
      .. "--build build)")
end

ffi.cdef(generated.cdef)

-- OpenBLAS's idle threads spin (sched_yield) for 2^28 cycles after each call unless told
-- otherwise, and with several threads a process they take a core from the CPU kernels' worker
-- pool between two GEMMs: the pool's jobs (attention, GELU, AdamW, Newton-Schulz batches) ran at
-- one thread's speed and a step took 10-13% longer. 2^16 cycles (some 20 us) still keeps
-- back-to-back GEMMs' threads awake. OpenBLAS reads the variable once, when it is loaded, so it
-- is set before liblwopt (and OpenBLAS with it) is; a user's own setting wins.
ffi.cdef("int setenv(const char *name, const char *value, int overwrite);")
ffi.C.setenv("OPENBLAS_THREAD_TIMEOUT", "16", 0)

-- The C library's calls that liblwopt does not wrap, for publish.lua's directory replaced
-- whole: Linux's renameat2 (glibc 2.28 and later; its RENAME_EXCHANGE swaps two names in one
-- step), hard links, and strerror for their messages. C.libc reaches them.
ffi.cdef([[
int renameat2(int olddirfd, const char *oldpath, int newdirfd, const char *newpath,
              unsigned int flags);
int link(const char *oldpath, const char *newpath);
char *strerror(int errnum);
]])

local path = os.getenv("LWOPT_LIB")
if path == nil or path == "" then path = generated.library end
local loaded, lib = pcall(ffi.load, path)
if not loaded then
   errors.fail("lwopt", "cannot load the library '%s' (%s); build it with make, or point "
      .. "LWOPT_LIB at liblwopt.so", path, tostring(lib))
end

-- The library stays loaded for the life of the process, whatever becomes of this module: the
-- finalizers of cdata it made (buffers, parsed JSON) call into it, and a collection that took the
-- library's namespace and such cdata in one cycle could unload it first and run them into
-- unmapped code. A host that drops and reloads modules (busted's insulation between spec files
-- did) would otherwise let that happen.
debug.getregistry()["lwopt.C: " .. path] = lib

-- Every lwopt process takes a write past the file-size limit (ulimit -f) as the full disk it is:
-- the write fails with EFBIG and is reported, instead of SIGXFSZ killing the process mid-record
-- (a log line cut, a .tmp left behind, no message).
lib.lw_file_size_limit_as_error()

-- declarations: the text given to ffi.cdef, which lwopt.options reads the option structs'
-- fields from.
local C = { lib = lib, path = path, libc = ffi.C, declarations = generated.cdef }

-- The last C error message.
function C.last_error()
   return ffi.string(lib.lw_last_error())
end

-- Raises the last C error, prefixed with the Lua function it surfaced in (and followed by a
-- hint, when given: what to change), when status fails: the one place a C status becomes an
-- error.
function C.check(status, where, hint)
   if status ~= 0 then errors.fail(where, "%s", C.last_error() .. (hint or "")) end
end

-- Enums by their names in C (src/lw.h: lw_<kind>_name, lw_<kind>_from_name), so that Lua keeps
-- no copy of the numbers or the words: kind is the enum's name without lw_ ("algorithm",
-- "dtype", "mode", "shard", "reduce_op", "ns_coeffs", "ns_precision", "matmul", "weight_decay", "muon_scale",
-- "muon_tp_mode", "path_kind"). The names are read once, by asking lw_<kind>_name for 0, 1, ... until NULL.
local enums = {}

local function enum(kind)
   local e = enums[kind]
   if e == nil then
      local name_of = lib["lw_" .. kind .. "_name"]
      e = { names = {}, cell = ffi.new("lw_" .. kind .. "[1]") }
      local p = name_of(0)
      while p ~= nil do
         e.names[#e.names + 1] = ffi.string(p)
         p = name_of(#e.names)
      end
      enums[kind] = e
   end
   return e
end

-- The names of enum `kind`, in the order of their values (a new list each call).
function C.names(kind)
   return { unpack(enum(kind).names) }
end

-- The name of a value of enum `kind`; nil for a value without one.
function C.name(kind, value)
   return enum(kind).names[tonumber(value) + 1]
end

-- The value of `name` in enum `kind`, or nil and lw_<kind>_from_name's message ("unknown
-- algorithm 'x' (one of cost, lpt, ...)"; a name that is not a string is shown by tostring).
function C.value(kind, name)
   local e = enum(kind)
   if lib["lw_" .. kind .. "_from_name"](tostring(name), e.cell) == 0 then
      return tonumber(e.cell[0])
   end
   return nil, C.last_error()
end

return C
