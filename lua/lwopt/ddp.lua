-- ddp.lua: lw.ddp.new, the flat parameter and gradient buffers of a layout (src/core/buffers/)
-- on a communicator: tensor views by name, and the gradient / parameter syncs that training
-- calls from its hooks. The mode picks the layout: layerwise (shard-aligned Muon buffers,
-- element-wise AdamW), legacy (unpadded, ping-pong owners), replicated (plain data parallel).
-- zero = 2 keeps only this rank's shard of the gradients, zero = 3 of the parameters too
-- (gathered per bucket group when a module acquires them); shard = "rows" splits every Muon
-- matrix by rows across the ranks instead (row-sharded FSDP, for comparison; needs zero 3).
local ffi = require("ffi")
local C = require("lwopt.C")
local route = require("lwopt.route")
local layout_mod = require("lwopt.layout")
local tensor = require("lwopt.tensor")
local comm_mod = require("lwopt.comm")
local errors = require("lwopt.errors")
local options = require("lwopt.options")

local lib = C.lib
local ddp = {}

local DDP = {}
DDP.__index = DDP

local WHERE = "lw.ddp.new"

-- What lw.ddp.new takes: the fields of the C structs it fills (lw_runtime_options,
-- lw_layout_options through lw.layout.compute, lw_buffers_options) by their C names, read from
-- the cdef (lwopt.options), adamw_algorithm under its Lua name adamw_layout, less dp (the
-- communicator's size); device is a name here (a pointer there); and Lua's own options.
local STRUCTS = { "lw_runtime_options", "lw_layout_options", "lw_buffers_options" }
local RENAMED = { adamw_algorithm = "adamw_layout" }
local NOT_OPTIONS = { dp = true }
local OWN = { "expert_comm", "overlap", "layout", "matmul", "param_dtype", "grad_dtype" }
local known = {}
for _, struct in ipairs(STRUCTS) do
   for _, f in ipairs(options.fields(struct)) do
      if not NOT_OPTIONS[f.name] then known[RENAMED[f.name] or f.name] = true end
   end
end
for _, k in ipairs(OWN) do known[k] = true end

local fail = errors.failer(WHERE)

-- The dtype words lw.ddp.new takes, as the layout names them.
local DTYPES = { fp32 = "f32", f32 = "f32", bf16 = "bf16" }

-- specs with every parameter's dtype (param_dtype) and gradient dtype (grad_dtype) set when the
-- options name them (nil keeps each spec's own, f32 by default).
local function with_dtypes(specs, o)
   local param, grad = o.param_dtype, o.grad_dtype
   for field, word in pairs({ param_dtype = param, grad_dtype = grad }) do
      if word ~= nil and DTYPES[word] == nil then
         fail("%s must be 'bf16' or 'fp32', got '%s'", field, tostring(word))
      end
   end
   if param == nil and grad == nil then return specs end
   local out = {}
   for i, s in ipairs(specs) do
      local copy = {}
      for k, v in pairs(s) do copy[k] = v end
      if param ~= nil then copy.dtype = DTYPES[param] end
      if grad ~= nil then copy.grad_dtype = DTYPES[grad] end
      out[i] = copy
   end
   return out
end


-- The runtime choices of opts (the fields of lw_runtime_options: mode, zero, shard, algorithm,
-- adamw_layout; lw_runtime_defaults for those unset) as lw_runtime_options: the names first,
-- turned into values by the C name functions of their enums, then the numbers; nil and a
-- message for a name they do not know or a number that is not an integer. With opts.layout the
-- layout is given: algorithm and adamw_layout are not choices then.
local function runtime_options(opts)
   local c = lib.lw_runtime_defaults()
   local fields = options.fields("lw_runtime_options")
   for _, f in ipairs(fields) do
      local word = opts[f.name]
      if f.kind == "enum" and word ~= nil and not RENAMED[f.name]
         and not (f.name == "algorithm" and opts.layout) then
         local v, why = C.value(f.enum, word)
         if v == nil then return nil, why end
         c[f.name] = v
      end
   end
   for _, f in ipairs(fields) do
      local x = opts[f.name]
      if f.kind == "integer" and x ~= nil then
         if type(x) ~= "number" or x ~= math.floor(x) or math.abs(x) >= 2 ^ 31 then
            return nil, ("%s must be an integer, got %s"):format(f.name, tostring(x))
         end
         c[f.name] = x
      elseif f.kind == "boolean" and x ~= nil then
         c[f.name] = x
      end
   end
   -- adamw_algorithm, in lw.layout's words (adamw_layout "aligned": the Muon buffers' algorithm)
   if opts.layout == nil and opts.adamw_layout ~= nil then
      local v, why = layout_mod.adamw_algorithm(opts.adamw_layout,
         opts.algorithm or layout_mod.defaults.algorithm)
      if v == nil then return nil, why end
      c.adamw_algorithm = v
   end
   return c
end

-- lw.ddp.check(opts): whether the runtime choices of opts (mode, zero, shard, algorithm,
-- adamw_layout) go together, by the rules of lw_runtime_check: true, or false and the message
-- ("runtime: zero 2 shards gradients across ranks; mode 'legacy' keeps them whole (use mode
-- 'layerwise')"), for a caller to say in its own words (the recipes, in their flags').
function ddp.check(opts)
   local c, why = runtime_options(opts or {})
   if c == nil then return false, why end
   if lib.lw_runtime_check(c, nil) ~= 0 then return false, C.last_error() end
   return true
end

-- The layout the choices stand for (lw_runtime_layout picks the algorithms from the mode and
-- shard), computed for comm.
local function layout_for(specs, comm, o, runtime)
   local lo = lib.lw_layout_defaults()
   C.check(lib.lw_runtime_layout(runtime, lo), WHERE)
   local given = { dp = comm.size,
      expert_dp = o.expert_dp or (o.expert_comm and o.expert_comm.size) or comm.size,
      algorithm = C.name("algorithm", lo.algorithm),
      adamw_layout = o.adamw_layout or C.name("algorithm", lo.adamw_algorithm) }
   -- the layout's other options as they were given (bucket_size, high_busbw, ...)
   for _, f in ipairs(options.fields("lw_layout_options")) do
      local key = RENAMED[f.name] or f.name
      if given[key] == nil then given[key] = o[key] end
   end
   return layout_mod.compute(specs, given)
end

-- c itself when its collectives move device's memory, else a device communicator over it.
local function for_device(c, device)
   if c:reaches(device) then return c end
   return comm_mod.device(c, device)
end

-- lw.ddp.new(specs, comm, opts): buffers for specs on comm (default: the world).
-- opts.param_dtype ("bf16" | "fp32"; nil: each spec's dtype, fp32 by default) is what the
-- parameter arrays hold and the all-gathers move: with bf16 the model reads its weight matrices
-- as stored (acquire_stored) and the other parameters widened to fp32 (acquire), and the
-- optimizer keeps the fp32 master copy of what this rank owns. opts.grad_dtype ("bf16" |
-- "fp32"; nil: each spec's, fp32 by default) is what the gradient sums move: bf16 rounds each
-- group's averaged fp32 gradient once and sums it in bf16; what the model writes and the
-- optimizer reads stays fp32 (lw_buffers_grad_dtype).
-- opts: mode ("layerwise" | "legacy" | "replicated"), algorithm, adamw_layout, bucket_size,
-- high_busbw, expert_dp, expert_comm, overlap (both overlaps; default true), overlap_grad,
-- overlap_param, layout (a layout computed before, instead of the layout options), zero
-- (1 | 2 | 3), shard ("aligned" | "rows"), device ("cpu" (default), "cuda", "cuda:N": where the
-- buffers live and the model's kernels run; "cuda" under a launcher is this rank's GPU, see
-- ddp.device), matmul ("fp32" | "tf32" | "bf16": the model kernels' matrix products on that
-- device, see lw_device_set_matmul; nil leaves the device's setting). Which choices go together is
-- lw.ddp.check's (C's). When comm (or expert_comm)
-- cannot move the device's memory (MPI, self), the buffers get a device communicator made over
-- it (NCCL, lw.comm.device: collective), kept as ddp.device_comm / ddp.device_expert_comm;
-- ddp.comm stays the one given, for collectives on host memory.
function ddp.new(specs, comm, opts)
   opts = opts or {}
   if type(opts) ~= "table" then fail("options must be a table") end
   for k in pairs(opts) do
      if not known[k] then fail("unknown option '%s'", tostring(k)) end
   end
   local runtime, why = runtime_options(opts)
   if runtime == nil then fail("%s", why) end
   C.check(lib.lw_runtime_check(runtime, nil), WHERE)
   local o = {}
   for k, v in pairs(opts) do o[k] = v end
   o.mode = C.name("mode", runtime.mode)
   o.zero = runtime.zero
   o.shard = C.name("shard", runtime.shard)
   comm = comm or comm_mod.init()
   local device = ddp.device(o.device or "cpu")
   if o.matmul ~= nil then
      local matmul, bad = C.value("matmul", o.matmul)
      if matmul == nil then fail("matmul: %s", bad) end
      C.check(lib.lw_device_set_matmul(device, matmul), WHERE)
   end
   if o.layout ~= nil and (o.param_dtype ~= nil or o.grad_dtype ~= nil) then
      fail("param_dtype and grad_dtype are the layout's when a layout is given")
   end
   local routed = with_dtypes(route.fill(specs, WHERE), o)
   local layout = o.layout or layout_for(routed, comm, o, runtime)
   local overlap = o.overlap ~= false
   local bo = lib.lw_buffers_defaults()
   bo.overlap_grad = overlap
   bo.overlap_param = overlap
   bo.device = device
   -- the plain fields given (zero: the runtime's, as checked above), overlap_grad and
   -- overlap_param over overlap
   for _, f in ipairs(options.fields("lw_buffers_options")) do
      if f.kind ~= "pointer" and o[f.name] ~= nil then bo[f.name] = o[f.name] end
   end
   -- the buffers' collectives move the device's memory: over MPI or self that takes a device
   -- communicator of the same ranks (every rank makes it here, in the same order)
   local device_comm = for_device(comm, device)
   local device_expert_comm = o.expert_comm and for_device(o.expert_comm, device)
   local out = ffi.new("lw_buffers*[1]")
   C.check(lib.lw_buffers_new(layout._c, device_comm._c,
      device_expert_comm and device_expert_comm._c or nil, bo, out), WHERE)
   local self = setmetatable({ layout = layout, comm = comm, mode = o.mode, specs = routed,
      expert_comm = o.expert_comm, zero = o.zero, shard = o.shard, device = device,
      stream = lib.lw_device_stream(device), host = lib.lw_device_is_host(device),
      -- kept alive as long as the buffers that borrow them
      device_comm = device_comm ~= comm and device_comm or nil,
      device_expert_comm = device_expert_comm ~= o.expert_comm and device_expert_comm or nil },
      DDP)
   self._c = ffi.gc(out[0], lib.lw_buffers_free)
   self.param_dtype = C.name("dtype", lib.lw_buffers_param_dtype(self._c))
   self.grad_dtype = C.name("dtype", lib.lw_buffers_grad_dtype(self._c))
   self._index = {}
   for i, s in ipairs(routed) do self._index[s.name] = i - 1 end
   return self
end

local device_out = ffi.new("lw_device*[1]")

-- The lw_device* called `name` ("cpu", "cuda", "cuda:N"); an error naming what is missing when
-- that device cannot be had. One GPU per rank: under a launcher (mpirun, srun) "cuda" is
-- cuda:<local rank>, the rank's place among the job's processes on its machine.
function ddp.device(name)
   if type(name) ~= "string" then fail("device must be a name (cpu, cuda or cuda:N)") end
   if name == "cuda" and lib.lw_comm_launched(nil, nil) then
      local lr = comm_mod.local_rank()
      if lr == nil then
         fail("device 'cuda' is this rank's GPU by its local rank, but the launcher set none "
            .. "(OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID, ...): name the GPU "
            .. "(cuda:N)")
      end
      if lib.lw_device_get("cuda:" .. lr, device_out) ~= 0 then
         fail("device 'cuda' is cuda:%d for local rank %d (one GPU per rank): %s; for ranks "
            .. "that share a GPU, name it (cuda:0: their buffers then go through host memory)",
            lr, lr, C.last_error())
      end
      return device_out[0]
   end
   C.check(lib.lw_device_get(name, device_out), WHERE)
   return device_out[0]
end


-- 0-based index of a parameter in the specs.
function DDP:index(name)
   local i = self._index[name]
   if i == nil then errors.misuse("ddp", "no parameter named '%s'", tostring(name)) end
   return i
end

local float_out = ffi.new("float*[1]")

-- The parameter as a tensor view into its buffer (never a copy).
function DDP:param(name)
   local i = self:index(name)
   C.check(lib.lw_buffers_param(self._c, i, float_out), "ddp:param")
   return tensor.view(float_out[0], self.specs[i + 1].shape, self)
end

function DDP:grad(name)
   local i = self:index(name)
   C.check(lib.lw_buffers_grad(self._c, i, float_out), "ddp:grad")
   return tensor.view(float_out[0], self.specs[i + 1].shape, self)
end

function DDP:zero_grad() C.check(lib.lw_buffers_zero_grad(self._c), "ddp:zero_grad") end

function DDP:grad_ready(name)
   C.check(lib.lw_buffers_grad_ready(self._c, self:index(name)), "ddp:grad_ready")
end

function DDP:finish_grad_sync()
   C.check(lib.lw_buffers_finish_grad_sync(self._c), "ddp:finish_grad_sync")
end

function DDP:start_param_sync()
   C.check(lib.lw_buffers_start_param_sync(self._c), "ddp:start_param_sync")
end

-- Waits for the parameters of group g (1-based, forward order; nil = all) and starts the next.
function DDP:finish_param_sync(g)
   C.check(lib.lw_buffers_finish_param_sync(self._c, g and g - 1 or -1), "ddp:finish_param_sync")
end

function DDP:num_groups() return lib.lw_buffers_num_groups(self._c) end

local int_out = ffi.new("int32_t[1]")

-- The group (1-based, forward order) whose parameter sync carries this parameter.
function DDP:group_of(name)
   C.check(lib.lw_buffers_param_group(self._c, self:index(name), int_out), "ddp:group_of")
   return int_out[0] + 1
end

function DDP:progress() C.check(lib.lw_buffers_progress(self._c), "ddp:progress") end

local start_out, count_out = ffi.new("int64_t[1]"), ffi.new("int64_t[1]")

-- The elements of a parameter this rank updates: 0-based start and count (0 when none).
function DDP:owned(name)
   C.check(lib.lw_buffers_owned(self._c, self:index(name), start_out, count_out), "ddp:owned")
   return tonumber(start_out[0]), tonumber(count_out[0])
end

local passes = { forward = lib.LW_PASS_FORWARD, backward = lib.LW_PASS_BACKWARD }

-- A module is about to read parameter `name` (pass "forward" | "backward"; reuse: a use out of
-- the pass's order, such as a tied weight read again). Returns its data and, in backward, its
-- gradient (float*), valid until ddp:release(name). At ZeRO-3 this gathers its bucket group
-- unless held (a collective: every rank must acquire in the same order).
function DDP:acquire(name, pass, reuse)
   local i = self:index(name)
   local p = passes[pass or "forward"]
   if p == nil then errors.misuse("ddp:acquire", "pass must be 'forward' or 'backward'") end
   C.check(lib.lw_buffers_acquire(self._c, i, p, reuse == true), "ddp:acquire")
   C.check(lib.lw_buffers_param(self._c, i, float_out), "ddp:acquire")
   local w = float_out[0]
   if p == lib.LW_PASS_FORWARD then return w, nil end
   C.check(lib.lw_buffers_grad(self._c, i, float_out), "ddp:acquire")
   return w, float_out[0]
end

local stored_out, dtype_out = ffi.new("const void*[1]"), ffi.new("lw_dtype[1]")

-- acquire for the model kernels that take a weight's dtype (a linear layer's weight, the
-- embedding tables, the LM head): the parameter as the buffers store it, its gradient (backward;
-- else nil) and its dtype (lw_dtype), valid until ddp:release(name). bf16 parameters are then
-- read as they are, never widened into an fp32 view.
function DDP:acquire_stored(name, pass, reuse)
   local i = self:index(name)
   local p = passes[pass or "forward"]
   if p == nil then
      errors.misuse("ddp:acquire_stored", "pass must be 'forward' or 'backward'")
   end
   C.check(lib.lw_buffers_acquire(self._c, i, p, reuse == true), "ddp:acquire_stored")
   C.check(lib.lw_buffers_param_stored(self._c, i, stored_out, dtype_out), "ddp:acquire_stored")
   local w, dtype = stored_out[0], dtype_out[0]
   if p == lib.LW_PASS_FORWARD then return w, nil, dtype end
   C.check(lib.lw_buffers_grad(self._c, i, float_out), "ddp:acquire_stored")
   return w, float_out[0], dtype
end

function DDP:release(name)
   C.check(lib.lw_buffers_release(self._c, self:index(name)), "ddp:release")
end

-- ZeRO-2/3: after each micro-step's backward, reduces what is still held whole.
function DDP:end_backward() C.check(lib.lw_buffers_end_backward(self._c), "ddp:end_backward") end

-- Hooks for Module:bind that only acquire and release (no gradient sync): lw.train.hooks adds
-- the gradient reports.
function DDP:hooks()
   return {
      acquire = function(name, pass, reuse) return self:acquire(name, pass, reuse) end,
      acquire_stored = function(name, pass, reuse)
         return self:acquire_stored(name, pass, reuse)
      end,
      release = function(name) self:release(name) end,
      ready = function() end,
   }
end

-- Explicit copies between host memory and the buffers' device, for everything above the device
-- layer (initialisation, checkpoints, logging, tests): n floats from device memory `src` into
-- host memory `dst` (a new float array when nil), and back.
function DDP:to_host(src, n, dst)
   dst = dst or ffi.new("float[?]", math.max(n, 1))
   C.check(lib.lw_device_copy(self.stream, dst, src, 4 * n, lib.LW_COPY_DEVICE_TO_HOST), "ddp")
   return dst
end

function DDP:from_host(dst, src, n)
   C.check(lib.lw_device_copy(self.stream, dst, src, 4 * n, lib.LW_COPY_HOST_TO_DEVICE), "ddp")
end

-- n floats of device memory as host memory to read: the memory itself where the host can read
-- it (the CPU), else a copy.
function DDP:host_floats(src, n)
   if self.host then return src end
   return self:to_host(src, n)
end

-- Calls fn(tensor) with parameter `name` (a tensor in host memory: a view on the CPU, a copy of
-- device memory elsewhere) to read or write it, at any ZeRO level; what fn wrote is kept
-- (ZeRO-3: committed to this rank's shard, so every rank must write the same values).
-- Collective at ZeRO-3.
function DDP:with_param(name, fn)
   local i = self:index(name)
   local w = self:acquire(name, "forward", true)
   local shape = self.specs[i + 1].shape
   local host = tensor.view(w, shape, self)
   if not self.host then
      local copy = self:to_host(w, host.numel)
      host = tensor.view(copy, shape, copy)
   end
   local ok, err = pcall(fn, host)
   if ok and not self.host then ok, err = pcall(self.from_host, self, w, host.data, host.numel) end
   if ok then
      C.check(lib.lw_buffers_param_group(self._c, i, int_out), "ddp:with_param")
      C.check(lib.lw_buffers_commit(self._c, int_out[0]), "ddp:with_param")
   end
   self:release(name)
   if not ok then errors.raise(err) end
end

-- Parameter `name` copied from the device into a new host float array, and its shape, at any
-- ZeRO level (collective at ZeRO-3: every rank acquires it); wanted false: take part in the
-- collective without copying (returns nil). Nothing is written back, unlike with_param.
local function copy_param(self, name, wanted)
   local shape = self.specs[self:index(name) + 1].shape
   local w = self:acquire(name, "forward", true)
   local ok, copy = true, nil
   if wanted ~= false then
      local numel = 1
      for _, d in ipairs(shape) do numel = numel * d end
      ok, copy = pcall(self.to_host, self, w, numel)
   end
   self:release(name)
   if not ok then errors.raise(copy) end
   return copy, shape
end

-- A copy of parameter `name` in host memory, as a tensor (any device, any ZeRO level;
-- collective at ZeRO-3).
function DDP:read_param(name)
   local copy, shape = copy_param(self, name)
   return tensor.view(copy, shape, copy)
end

-- Writes parameter `name` from src (a tensor, a Lua list or a function of the 1-based index, as
-- tensor:copy takes) on every rank (collective at ZeRO-3; every rank writes the same values).
function DDP:write_param(name, src)
   self:with_param(name, function(p) p:copy(src) end)
end

-- Every parameter as { name, shape, data = float* } on rank `root` (default 0), for writing
-- them out; other ranks get an empty list. fp32 parameters below ZeRO-3 on the CPU: the views;
-- else copies (of the fp32 views of bf16 parameters), gathered one at a time with every rank
-- taking part at ZeRO-3 (root then holds the whole model).
function DDP:params_on(root)
   root = root or 0
   local out = {}
   for _, spec in ipairs(self.specs) do
      if self.zero < 3 and self.host and self.param_dtype == "f32" then
         if self.comm.rank == root then
            out[#out + 1] = { name = spec.name, shape = spec.shape, data = self:param(spec.name).data }
         end
      else
         local copy = copy_param(self, spec.name, self.comm.rank == root)
         if copy then out[#out + 1] = { name = spec.name, shape = spec.shape, data = copy } end
      end
   end
   return out
end

-- Copies every parameter from rank `root` (default 0) to all ranks; the experts within their
-- expert-DP group only (from its rank `root`): under expert parallelism the other ranks of the
-- world hold other experts under their own names.
function DDP:broadcast_params(root)
   for _, spec in ipairs(self.specs) do
      local comm = spec.expert and self.expert_comm or self.comm
      self:with_param(spec.name, function(t)
         lib.lw_comm_set_label(comm._c, "parameter " .. spec.name)
         C.check(lib.lw_comm_broadcast(comm._c, t.data, 4 * t.numel, root or 0),
            "ddp:broadcast_params")
      end)
   end
end

-- Bytes this rank holds for parameters and gradients (lw_buffers_memory), as numbers.
function DDP:memory()
   local m = ffi.new("lw_buffers_memory")
   C.check(lib.lw_buffers_memory_get(self._c, m), "ddp:memory")
   local out = {}
   for _, k in ipairs({ "params", "grads", "arrays", "cached", "peak", "budget", "block_bytes",
      "over_budget", "gathers", "flushes" }) do
      out[k] = tonumber(m[k])
   end
   return out
end

return ddp
