-- nn/module.lua: the base of lw.nn's modules: the Module class (declared parameters, children,
-- binding to lw.ddp through hooks), with_params (the one path from a module to its parameters)
-- and the activation allocator. The modules themselves are in the other files of lwopt/nn/.
--
-- The module contract, torch nn's on raw pointers into the memory of the device the module is
-- bound to (the kernels of lw.h run on its stream; src/core/device/cpu/ on the CPU):
--   Class.new(...)        declares the module's parameters (name, shape, role) and children; it
--                         allocates no parameter: lw.ddp binds each to its buffer view (bind)
--   m:parameters()        specs of the module and its children, in definition order (lw.arch's)
--   m:forward(input, shape...) -> output
--   m:backward(input, grad_output, grad_input, shape...)
--   shape...      the sizes the pointers do not carry, named by Class.shape_args: { "n" } (n
--                 rows) for modules that work row by row (Linear, LayerNorm, GELU, MLP, MoE),
--                 { "b", "t" } (b sequences of t) for those that see sequences (Embedding,
--                 CausalSelfAttention, Block)
--   input         float* [rows, width in] (Embedding: int32_t* tokens [b*t])
--   output        float* [rows, width out], an activation buffer of m: valid until m's next
--                 forward
--   backward      follows the forward of the same input (a module keeps what forward computed
--                 for it); accumulates (+=) into grad_input [rows, width in] and into the
--                 parameter gradients, as llm.c's kernels do: zero them first, or let
--                 micro-steps sum. grad_input nil: no input gradient (Linear allows it; the
--                 tokens of Embedding have none, so it must be nil there).
-- nn.GPT's top level keeps a loss API, forward(tokens, targets, b, t) -> loss and
-- backward(loss_scale): its output is one number, the gradient backward starts from comes from
-- the targets rather than a caller's grad_output, and a training loop has nothing to keep
-- between the two calls (the model keeps its input).
--
-- A module reads its parameters only inside with_params, which acquires them through the hooks
-- bind installed (the runtime says where they are; at ZeRO-3 that changes from use to use),
-- runs the kernel, releases them (the runtime may drop them), and after a backward reports each
-- gradient complete (ready), so communication overlaps compute.
local ffi = require("ffi")
local C = require("lwopt.C")
local errors = require("lwopt.errors")

local lib = C.lib
local base = {}

local F32 = lib.LW_DTYPE_F32

local activation_bytes = 0

local out_cell = ffi.new("void*[1]")

-- Zeroed floats of `device` (lw_device*; nil: the CPU's) from the C allocator (ffi.new stops
-- at 2 GiB and says only "not enough memory"); `what` names the buffer in the error. Every
-- activation buffer comes from here.
local function floats(n, what, device)
   local bytes = 4 * math.max(n, 1)
   device = device or lib.lw_device_cpu()
   if lib.lw_device_alloc(device, bytes, out_cell) ~= 0 then
      errors.fail("lw.nn", "cannot allocate the activations %s: %s, with %.2f GiB of "
         .. "activations already allocated by this process; use a smaller batch or sequence "
         .. "length", what, C.last_error(), activation_bytes / 2 ^ 30)
   end
   activation_bytes = activation_bytes + bytes
   return ffi.gc(ffi.cast("float*", out_cell[0]), function(p)
      activation_bytes = activation_bytes - bytes
      lib.lw_device_free(device, p)
   end)
end

-- A buffer entry { n, data } of at least n floats for a slot holding `old` (or nil): old when it
-- is big enough, else a new one. A buffer outgrown again and again (rows routed to experts,
-- received from other EP ranks) grows by half at least each time, so it is replaced a
-- logarithmic number of times; the old one is freed when collected.
local function grown(old, n, what, device)
   if old ~= nil and old.n >= n then return old end
   local size = old and math.max(n, math.ceil(1.5 * old.n)) or n
   return { n = size, data = floats(size, what, device) }
end

-- Bytes of activation buffers held by the modules of this process (those of outgrown buffers
-- until they are collected).
function base.activation_bytes() return activation_bytes end

-- Floats of buffer that hold n activations of dtype (lw_dtype): n for fp32, half (rounded up)
-- for bf16, which the kernels write as 16-bit values.
function base.floats_for(n, dtype)
   return dtype == lib.LW_DTYPE_BF16 and math.ceil(n / 2) or n
end

-- Raises the error of a failed kernel call (status st); nothing to do on success, the hot path.
function base.check(st)
   if st ~= 0 then C.check(st, "lw.nn") end
end

-- Sets n floats at p (memory of the stream's device) to zero: a gradient buffer before a
-- backward accumulates into it.
function base.zero(p, n, stream) base.check(lib.lw_device_set(stream, p, 0, 4 * n)) end

-- A class table: instances are setmetatable({}, c); methods not in c come from parent.
function base.class(parent)
   local c = {}
   c.__index = c
   if parent then setmetatable(c, { __index = parent }) end
   return c
end

-- ---- Module: declared parameters, children, binding, hooks ---------------------------------

local Module = base.class()
base.Module = Module

function Module:init(prefix)
   self.prefix = prefix or ""
   self.entries = {} -- specs and child modules, in definition order
   self.own = {} -- own specs, in definition order
   self.ready_order = {} -- own full names, in the order backward reports their gradients
   -- short name -> float* (within with_params; a stored read: the stored data), its gradient,
   -- and for stored reads the data's lw_dtype (an fp32 read: LW_DTYPE_F32)
   self.w, self.g, self.dtype = {}, {}, {}
   return self
end

-- The parameters (short names) a class's kernels read with their dtype (Class.stored_reads =
-- { weight = true }): acquired as stored, so bf16 parameters are never widened to fp32 views.
Module.stored_reads = {}

-- Declares a parameter `prefix .. name`; returns its spec. Its gradient is reported after the
-- ones declared before it, unless the module sets another ready_order.
function Module:declare(name, shape, role, extra)
   local spec = { name = self.prefix .. name, shape = shape, dtype = "f32", role = role,
                  shared_embedding = false, expert = false, short = name }
   for k, v in pairs(extra or {}) do spec[k] = v end
   self.entries[#self.entries + 1] = { spec = spec }
   self.own[#self.own + 1] = spec
   self.ready_order[#self.ready_order + 1] = spec.name
   return spec
end

function Module:add(child)
   self.entries[#self.entries + 1] = { child = child }
   return child
end

-- Parameter specs of the module and its children, in definition order (lw.arch's shape).
function Module:parameters(out)
   out = out or {}
   for _, e in ipairs(self.entries) do
      if e.spec then
         local copy = {}
         for k, v in pairs(e.spec) do if k ~= "short" then copy[k] = v end end
         out[#out + 1] = copy
      else
         e.child:parameters(out)
      end
   end
   return out
end

-- Binds the module and its children to ddp (lw.ddp) through hooks:
-- hooks.acquire(name, pass, reuse) -> data, grad before a module reads parameter `name`
-- ("forward" | "backward"; grad only in backward), hooks.release(name) when it is done with it,
-- hooks.ready(name) when its gradient is complete. nil: ddp:hooks() (no gradient reports).
-- hooks.acquire_stored(name, pass, reuse) -> data, grad, dtype (optional): the parameter as
-- stored, for the parameters a module's class names in stored_reads (those its kernels read with
-- their dtype); without it those are acquired as fp32 too. Hooks that wrap acquire (to log or
-- reorder) must wrap acquire_stored alike: the weight matrices come through it.
-- ddp nil (hooks given): the module runs on the CPU.
function Module:bind(ddp, hooks)
   self.hooks = hooks or ddp:hooks()
   -- kernels run and activations live where the parameters do
   if ddp then self.device, self.stream = ddp.device, ddp.stream end
   for _, e in ipairs(self.entries) do
      if e.child then e.child:bind(ddp, self.hooks) end
   end
end

-- Own parameter names, for the hooks.
function Module:own_names()
   local names = {}
   for _, spec in ipairs(self.own) do names[#names + 1] = spec.name end
   return names
end

-- Makes the module's own parameters (and in backward their gradients) reachable through
-- self.w / self.g until release. reuse: a use out of the pass's order (a tied weight).
function Module:acquire(pass, reuse)
   local h, w, g, dtype, stored = self.hooks, self.w, self.g, self.dtype, self.stored_reads
   for _, spec in ipairs(self.own) do
      local short = spec.short
      if stored[short] and h.acquire_stored then
         w[short], g[short], dtype[short] = h.acquire_stored(spec.name, pass, reuse)
      else
         w[short], g[short] = h.acquire(spec.name, pass, reuse)
         dtype[short] = F32
      end
   end
end

function Module:release()
   local h = self.hooks
   for _, spec in ipairs(self.own) do h.release(spec.name) end
end

function Module:ready(short) self.hooks.ready(self.prefix .. short) end

-- Runs kernel(self, a1, .., a5) with the module's own parameters in self.w (by short name)
-- and, in backward, their gradients in self.g: acquire, kernel, release, and after a backward
-- each gradient reported complete, in self.ready_order. Returns what kernel returns. kernel is
-- a function made once, beside the module, and the arguments are a fixed five, so a call
-- allocates nothing and the JIT compiles it through.
function Module:with_params(pass, kernel, a1, a2, a3, a4, a5)
   self:acquire(pass)
   local result = kernel(self, a1, a2, a3, a4, a5)
   self:release()
   if pass == "backward" then
      local ready, order = self.hooks.ready, self.ready_order
      for i = 1, #order do ready(order[i]) end
   end
   return result
end

-- with_params for parameters read again out of the pass's order (a tied embedding read by the
-- LM head): acquired as a reuse, and no gradient is reported, since the module's own backward
-- is what completes it.
function Module:with_params_reused(pass, kernel, a1, a2, a3, a4, a5)
   self:acquire(pass, true)
   local result = kernel(self, a1, a2, a3, a4, a5)
   self:release()
   return result
end

-- Scratch floats of the module's device shared by every module there, valid only within one
-- kernel call (attention's workspace): one buffer, grown to the largest request; `what` names
-- it in the error when it cannot be allocated.
local workspaces = {} -- by the device's address (cdata keys compare by object, not address)

function Module:workspace(n, what)
   local key = self.device and tonumber(ffi.cast("uintptr_t", self.device)) or 0
   local ws = workspaces[key]
   if ws == nil or ws.n < n then
      ws = grown(ws, n, ("'%s' (one buffer every layer shares)"):format(what), self.device)
      workspaces[key] = ws
   end
   return ws.data
end

-- Buffers that live only within one call of a module (a backward's intermediate gradients),
-- shared by every module of the same class on the same device: modules of one class run one
-- after another, never one inside another, so a model of L layers holds one set of them rather
-- than L. Never for what a later call reads (what a forward keeps for its backward).
local transients = {} -- by the device's address, then the class, then the key

function Module:transient(key, n)
   local dev = self.device and tonumber(ffi.cast("uintptr_t", self.device)) or 0
   local classes = transients[dev] or {}
   transients[dev] = classes
   local class = getmetatable(self)
   local slots = classes[class] or {}
   classes[class] = slots
   local b = slots[key]
   if b == nil or b.n < n then
      b = grown(b, n, ("'%s' (one buffer every module of its kind shares)"):format(key),
         self.device)
      slots[key] = b
   end
   return b.data
end

-- A forward's output buffer: the module's own, or with transient_output set (by a parent that
-- reads the output at once and never in its backward: the projections back to the residual
-- stream) a transient one. Modules given rows of their owner's buffers keep those.
function Module:output(key, n)
   if self.transient_output and self.rows_window == nil then return self:transient(key, n) end
   return self:buffer(key, n)
end

-- Host memory that lives as long as the module, per key: at least n elements of ctype
-- ("float", "int32_t", "int64_t"), grown on demand; the staging arrays of copies to and from
-- the device (token uploads, routing permutations, all-to-all counts, sampled logits).
function Module:host_array(key, ctype, n)
   self.host = self.host or {}
   local slot = ctype .. " " .. key
   local h = self.host[slot]
   if h == nil or h.n < n then
      h = { n = n, data = ffi.new(ctype .. "[?]", math.max(n, 1)) }
      self.host[slot] = h
   end
   return h.data
end

-- An int32_t* activation buffer of the module's device (4 bytes an element, as floats).
function Module:int_buffer(key, n) return ffi.cast("int32_t *", self:buffer(key, n)) end

-- Activation buffers per (rows) shape, allocated once. A module given rows of its owner's
-- buffers (share_rows) gets its window of them instead.
function Module:buffer(key, n)
   local w = self.rows_window
   if w ~= nil then return w.owner:rows_of(w.path .. key, n, w) end
   self.buffers = self.buffers or {}
   local b = self.buffers[key]
   if b == nil or b.n < n then
      local owner = self.prefix ~= "" and self.prefix:gsub("%.$", "") or "the model"
      b = grown(b, n, ("'%s' of %s"):format(key, owner), self.device)
      self.buffers[key] = b
   end
   return b.data
end

-- Row windows: modules that run one after another on consecutive row ranges of one array (a
-- mixture of experts' experts, each on the rows routed to it) share their activation buffers:
-- owner:share_rows(m, first, count, total) makes m and the modules under it take, for each of
-- their buffers, rows [first, first + count) of one buffer of `total` rows that the owner keeps
-- per (module position under m, key). Together they then hold total rows, not count rows each.
function Module:share_rows(m, first, count, total, path)
   path = path or ""
   local w = m.rows_window or {}
   w.owner, w.path, w.first, w.count, w.total = self, path, first, count, total
   m.rows_window = w
   local i = 0
   for _, e in ipairs(m.entries) do
      if e.child then
         i = i + 1
         self:share_rows(e.child, first, count, total, path .. i .. ".")
      end
   end
end

-- The window w of the owner's shared buffer `key`: n floats for w.count rows.
function Module:rows_of(key, n, w)
   local width = n / w.count
   return self:buffer("rows " .. key, w.total * width) + w.first * width
end

return base
