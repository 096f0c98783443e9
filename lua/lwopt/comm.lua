-- comm.lua: the communicator (src/core/comm*.c) from Lua, and lw.comm.run, which makes an
-- error on any rank end the whole MPI job with "[rank r] message" instead of a hang.
local ffi = require("ffi")
local C = require("lwopt.C")
local errors = require("lwopt.errors")

local lib = C.lib
local comm = {}

local Comm = {}
Comm.__index = Comm

-- The counters' keys, for the lw_comm_op values.
local ops = {
   { "allreduce", lib.LW_COMM_ALLREDUCE }, { "reduce_scatter", lib.LW_COMM_REDUCE_SCATTER },
   { "allgather", lib.LW_COMM_ALLGATHER }, { "allgatherv", lib.LW_COMM_ALLGATHERV },
   { "broadcast", lib.LW_COMM_BROADCAST }, { "barrier", lib.LW_COMM_BARRIER },
   { "alltoall", lib.LW_COMM_ALLTOALL },
}
-- The dtypes an all-reduce of Lua numbers takes, and their C types.
local ctypes = { f32 = "float", f64 = "double", i64 = "int64_t" }

local function wrap(ptr)
   local self = setmetatable({ _c = ffi.gc(ptr, lib.lw_comm_free) }, Comm)
   self.rank = lib.lw_comm_rank(ptr)
   self.size = lib.lw_comm_size(ptr)
   self.backend = ffi.string(lib.lw_comm_backend(ptr))
   return self
end

local world

-- The world communicator (one per process): MPI when started by mpirun, else one rank.
-- timeout: its watchdog's seconds (default LWOPT_TIMEOUT, else 600; 0: none), which also bound
-- MPI's start-up, where a rank that never arrives would leave the others waiting for good
-- (lw_comm_init_timeout); taken by the first call, which makes the world.
function comm.init(timeout)
   if world == nil then
      local out = ffi.new("lw_comm*[1]")
      C.check(lib.lw_comm_init_timeout(timeout or -1, out), "lw.comm.init")
      world = wrap(out[0])
   end
   return world
end

-- A one-rank communicator, whatever launched the process.
function comm.self()
   local out = ffi.new("lw_comm*[1]")
   C.check(lib.lw_comm_self(out), "lw.comm.self")
   return wrap(out[0])
end

-- The kind of device communicator comm.device makes when none is named: "auto" (NCCL when
-- every rank has a GPU of its own, else staged; LWOPT_DEVICE_COMM decides instead when set),
-- "nccl" or "staged" (through host memory and parent: ranks sharing a GPU). A recipe sets it
-- once (--device-comm) for every device communicator it makes (buffers, TP, EP).
local device_kind = "auto"

function comm.set_device_kind(kind)
   local code, why = C.value("device_comm", kind)
   if code == nil then errors.misuse("lw.comm.set_device_kind", "%s", why) end
   device_kind = kind
end

-- A communicator of parent's ranks that moves `device`'s memory (an lw_device*), of `kind`
-- (default: set_device_kind's), bootstrapped over parent (collective over it):
-- lw_comm_device_new_kind. Host-memory collectives on it go through parent, which it keeps
-- alive. self.about says which kind it is and why (lw_comm_about).
function comm.device(parent, device, kind)
   kind = kind or device_kind
   local code, why = C.value("device_comm", kind)
   if code == nil then errors.misuse("lw.comm.device", "%s", why) end
   local out = ffi.new("lw_comm*[1]")
   C.check(lib.lw_comm_device_new_kind(parent._c, device, code, out), "lw.comm.device")
   local self = wrap(out[0])
   self.parent = parent
   self.about = ffi.string(lib.lw_comm_about(out[0]))
   return self
end

-- Whether this communicator's collectives move `device`'s memory (lw_comm_reaches).
function Comm:reaches(device) return lib.lw_comm_reaches(self._c, device) end

function Comm:split(color, key)
   local out = ffi.new("lw_comm*[1]")
   C.check(lib.lw_comm_split(self._c, color, key or self.rank, out), "comm:split")
   return wrap(out[0])
end

function Comm:barrier()
   C.check(lib.lw_comm_barrier(self._c), "comm:barrier")
end

-- All-reduce of a Lua list of numbers (op "sum" | "max" | "min", dtype "f64" | "f32" | "i64");
-- returns a new list.
function Comm:allreduce(values, op, dtype)
   dtype = dtype or "f64"
   local code = C.value("reduce_op", op or "sum")
   if code == nil then errors.misuse("comm:allreduce", "unknown op '%s'", tostring(op)) end
   if ctypes[dtype] == nil then
      errors.misuse("comm:allreduce", "unknown dtype '%s'", tostring(dtype))
   end
   local n = #values
   local buf = ffi.new(ctypes[dtype] .. "[?]", math.max(n, 1))
   for i = 1, n do buf[i - 1] = values[i] end
   C.check(lib.lw_comm_allreduce(self._c, buf, n, C.value("dtype", dtype), code), "comm:allreduce")
   local out = {}
   for i = 1, n do out[i] = tonumber(buf[i - 1]) end
   return out
end

-- The dtypes an all-to-all of Lua numbers takes, and their C types.
local exchange_ctypes = { i64 = "int64_t", f32 = "float" }

-- All-to-all of Lua lists (collective): parts[j] is the list of numbers this rank sends rank
-- j - 1 (one list per rank, possibly empty, its own included); returns a new list of lists, the
-- j-th what rank j - 1 sent this rank. dtype "i64" (the default: counts, expert ids, positions;
-- integers within 2^53) or "f32". Two lw_comm_alltoallv calls: first one count per peer, so
-- that each rank learns what it receives, then the values (a label set before names the
-- first). For scripts and small metadata; a model's buffers call lw_comm_alltoallv itself.
function Comm:alltoallv(parts, dtype)
   dtype = dtype or "i64"
   local ctype = exchange_ctypes[dtype]
   if ctype == nil then
      errors.misuse("comm:alltoallv", "unknown dtype '%s' (i64 or f32)", tostring(dtype))
   end
   local n = self.size
   if type(parts) ~= "table" or #parts ~= n then
      errors.misuse("comm:alltoallv", "parts must be a list of %d lists (one per rank), got %s",
         n, type(parts) == "table" and #parts .. " lists" or type(parts))
   end
   local ones, send_counts = ffi.new("int64_t[?]", n), ffi.new("int64_t[?]", n)
   local recv_counts = ffi.new("int64_t[?]", n)
   local sent = 0
   for j = 1, n do
      local part = parts[j]
      if type(part) ~= "table" then
         errors.misuse("comm:alltoallv", "parts[%d] (for rank %d) must be a list, got %s", j,
            j - 1, type(part))
      end
      for i = 1, #part do
         local v = part[i]
         local ok = type(v) == "number"
            and (dtype ~= "i64" or (v == math.floor(v) and math.abs(v) <= 2 ^ 53))
         if not ok then
            errors.misuse("comm:alltoallv", "parts[%d][%d] is %s, not %s", j, i, tostring(v),
               dtype == "i64" and "an integer within 2^53 (dtype i64)" or "a number")
         end
      end
      ones[j - 1], send_counts[j - 1] = 1, #part
      sent = sent + #part
   end
   local code = C.value("dtype", dtype)
   C.check(lib.lw_comm_alltoallv(self._c, send_counts, ones, recv_counts, ones,
      lib.LW_DTYPE_I64, nil), "comm:alltoallv")
   local received = 0
   for j = 0, n - 1 do received = received + tonumber(recv_counts[j]) end
   local send = ffi.new(ctype .. "[?]", math.max(sent, 1))
   local recv = ffi.new(ctype .. "[?]", math.max(received, 1))
   local at = 0
   for j = 1, n do
      local part = parts[j]
      for i = 1, #part do
         send[at], at = part[i], at + 1
      end
   end
   C.check(lib.lw_comm_alltoallv(self._c, send, send_counts, recv, recv_counts, code, nil),
      "comm:alltoallv")
   local out = {}
   at = 0
   for j = 1, n do
      local part = {}
      for i = 1, tonumber(recv_counts[j - 1]) do
         part[i], at = tonumber(recv[at]), at + 1
      end
      out[j] = part
   end
   return out
end

-- Broadcast of a string from root; returns the root's string on every rank.
function Comm:broadcast_string(s, root)
   root = root or 0
   local len = ffi.new("int64_t[1]", self.rank == root and #s or 0)
   C.check(lib.lw_comm_broadcast(self._c, len, 8, root), "comm:broadcast_string")
   local n = tonumber(len[0])
   local buf = ffi.new("char[?]", math.max(n, 1))
   if self.rank == root then ffi.copy(buf, s, n) end
   C.check(lib.lw_comm_broadcast(self._c, buf, n, root), "comm:broadcast_string")
   return ffi.string(buf, n)
end

-- Counters per operation: { allreduce = { calls, bytes, seconds }, ... }.
function Comm:counters()
   local out, c = {}, ffi.new("lw_comm_counter")
   for _, op in ipairs(ops) do
      C.check(lib.lw_comm_counter_get(self._c, op[2], c), "comm:counters")
      out[op[1]] = { calls = tonumber(c.calls), bytes = tonumber(c.bytes), seconds = c.seconds }
   end
   return out
end

function Comm:reset_counters() lib.lw_comm_counters_reset(self._c) end

-- The watchdog: a collective on this communicator still in flight after `seconds` ends with an
-- error naming the rank, the collective and the phase, and the communicator is broken (run
-- then ends the job). 0 turns it off; the default is LWOPT_TIMEOUT, else 600.
function Comm:set_timeout(seconds)
   if type(seconds) ~= "number" then
      errors.misuse("comm:set_timeout", "seconds must be a number, got %s", type(seconds))
   end
   C.check(lib.lw_comm_set_timeout(self._c, seconds), "comm:set_timeout")
end

-- The watchdog's timeout in seconds (0 = off).
function Comm:timeout() return lib.lw_comm_timeout(self._c) end

-- A setter of one of the comm's texts named in a timeout's message (nil clears it).
local function text_setter(method, c_setter)
   return function(self, text)
      if text ~= nil and type(text) ~= "string" then
         errors.misuse("comm:" .. method, "text must be a string or nil, got %s", type(text))
      end
      C.check(lib[c_setter](self._c, text), "comm:" .. method)
   end
end

-- What this rank is doing ("step 12", "checkpoint.save"), until changed.
Comm.set_phase = text_setter("set_phase", "lw_comm_set_phase")
-- What the next collective on this communicator is for ("the validation loss"); that one only.
Comm.set_label = text_setter("set_label", "lw_comm_set_label")

-- Ends every rank of the job with `code`; on one rank, exits the process.
function Comm:abort(code)
   io.stderr:flush()
   io.stdout:flush()
   lib.lw_comm_abort(self._c, code or 1)
   os.exit(code or 1)
end

-- "[rank r] text", unless text already names its rank.
local function with_rank(rank, text)
   return text:match("^%[rank %d+%] ") and text or ("[rank %d] %s"):format(rank, text)
end

-- Every rank's verdict on a piece of work that may fail on some ranks only (collective: every
-- rank calls it with ok and, when not ok, a message). Returns when all succeeded; otherwise
-- every rank raises the same error: the message of the lowest failing rank, "[rank r] "-prefixed
-- when there are several ranks, so the job reports the cause once instead of "another rank
-- failed".
function Comm:agree(ok, message)
   if self.size == 1 then
      if not ok then errors.raise(message) end
      return
   end
   local failed = {}
   for r = 1, self.size do failed[r] = 0 end
   if not ok then failed[self.rank + 1] = 1 end
   failed = self:allreduce(failed)
   for r = 1, self.size do
      if failed[r] > 0 then
         errors.raise(with_rank(r - 1, self:broadcast_string(ok and "" or tostring(message),
            r - 1)))
      end
   end
end

-- The launcher's view of this process before MPI starts: (rank, size) that mpirun (or another
-- PMI launcher) gave it, or 0, 1 when not launched by one (lw_comm_launched).
local launched_rank, launched_size = ffi.new("int32_t[1]"), ffi.new("int32_t[1]")
function comm.launched()
   lib.lw_comm_launched(launched_rank, launched_size)
   return launched_rank[0], launched_size[0]
end

-- This process's rank among the job's processes on its machine (lw_comm_local_rank): 0 when
-- not launched, nil when a launcher started it but did not say.
function comm.local_rank()
   local r = lib.lw_comm_local_rank()
   if r < 0 then return nil end
   return r
end

-- An error message meant for the user: raised by errors.fail or C.check, so it carries no Lua
-- source position. Anything else (a runtime error, errors.misuse: a program's wrong argument) is
-- internal, and is printed with its traceback.
local function for_user(err)
   return type(err) == "string" and not err:match("^%S+:%d+: ") and not err:match("^%[string ")
end

-- Seconds a rank other than 0 waits before reporting its error (comm.fail).
comm.REPORT_DELAY = 2

-- Prints message and ends the process with status: every rank of the job when there are
-- several (MPI_Abort once MPI runs; before that, mpirun ends the job when a rank exits non-zero).
-- Ranks other than 0 wait comm.REPORT_DELAY seconds first: rank 0 usually fails the same way at
-- the same moment, so the cause prints once.
function comm.fail(message, status)
   status = status or 1
   -- a job that ends ends: the signals mpirun sends to end the other ranks are not taken as
   -- requests to stop at a step's end (lw_stop_watch) any more
   lib.lw_stop_unwatch()
   local rank, size = comm.launched()
   if world ~= nil then rank, size = world.rank, world.size end
   io.stdout:flush()
   if size > 1 and rank ~= 0 then os.execute("sleep " .. comm.REPORT_DELAY) end
   io.stderr:write(size > 1 and with_rank(rank, message) or message, "\n")
   if world ~= nil and world.size > 1 then world:abort(status) end
   io.stderr:flush()
   os.exit(status)
end

-- Runs fn(); on an error prints it once and ends the whole job (MPI_Abort), so that no rank is
-- left waiting in a collective. A message for the user prints as one line; an internal error
-- (or any error with LWOPT_TRACEBACK=1) with its traceback. Returns fn's results.
function comm.run(fn, ...)
   local args = { n = select("#", ...), ... }
   local traceback
   local results = { xpcall(function() return fn(unpack(args, 1, args.n)) end, function(err)
      traceback = debug.traceback("", 2)
      return err
   end) }
   if results[1] then return unpack(results, 2, table.maxn(results)) end
   local err = results[2]
   local message = tostring(err)
   -- Ctrl-C where no stop is watched for (lw_stop_watch): LuaJIT raises "interrupted!" wherever
   -- the program was; the user asked for it, so one line and the shell's status for SIGINT
   if message:match("interrupted!$") and os.getenv("LWOPT_TRACEBACK") ~= "1" then
      comm.fail("interrupted (Ctrl-C)", 130)
   end
   if not for_user(err) or os.getenv("LWOPT_TRACEBACK") == "1" then
      message = message .. traceback
   end
   comm.fail(message, 1)
end

-- Ends the process with status after a clean shutdown (every rank calls it: MPI is finalised),
-- for runs that finish their work but must report failure (a diverged run, an output that
-- could not be written).
function comm.exit(status)
   io.stdout:flush()
   io.stderr:flush()
   os.exit(status)
end

return comm
