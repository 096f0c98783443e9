-- nn.lua: model modules over the C kernels (src/core/nn_*.c), torch-nn style: a module declares
-- its parameters (name, shape, role) at construction, never allocates them (lw.ddp binds each to
-- its buffer view), and has forward(input) and backward(input, grad_output). Activations live in
-- buffers allocated once per (batch, time) shape; backward accumulates into gradients (zero them
-- first, or let micro-steps sum). Hooks tell the runtime when a module is about to use its
-- parameters (acquire: the runtime returns where they are, which at ZeRO-3 changes from use to
-- use), when it is done with them (release), and when a parameter's gradient is complete
-- (ready), so communication overlaps compute.
local ffi = require("ffi")
local C = require("lwopt.C")

local lib = C.lib
local nn = {}

local activation_bytes = 0

local out_cell = ffi.new("void*[1]")

-- Zeroed floats from the C allocator (ffi.new stops at 2 GiB and says only "not enough
-- memory"); `what` names the buffer in the error.
local function floats(n, what)
   local bytes = 4 * math.max(n, 1)
   if lib.lw_host_alloc(bytes, out_cell) ~= 0 then
      error(("lw.nn: cannot allocate the activations %s: %s, with %.2f GiB of activations "
         .. "already allocated by this process; use a smaller batch or sequence length")
         :format(what, C.last_error(), activation_bytes / 2 ^ 30), 0)
   end
   activation_bytes = activation_bytes + bytes
   return ffi.gc(ffi.cast("float*", out_cell[0]), lib.lw_host_free)
end

-- Bytes of activation buffers allocated by the modules of this process.
function nn.activation_bytes() return activation_bytes end
local function zero(p, n) ffi.fill(p, 4 * n) end

local function class(parent)
   local c = {}
   c.__index = c
   if parent then setmetatable(c, { __index = parent }) end
   return c
end

-- ---- Module: declared parameters, children, binding, hooks ---------------------------------

local Module = class()
nn.Module = Module

function Module:init(prefix)
   self.prefix = prefix or ""
   self.entries = {} -- specs and child modules, in definition order
   self.w, self.g = {}, {} -- short name -> float* (bound by bind)
   return self
end

-- Declares a parameter `prefix .. name`; returns its spec.
function Module:declare(name, shape, role, extra)
   local spec = { name = self.prefix .. name, shape = shape, dtype = "f32", role = role,
                  shared_embedding = false, expert = false, short = name }
   for k, v in pairs(extra or {}) do spec[k] = v end
   self.entries[#self.entries + 1] = { spec = spec }
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
function Module:bind(ddp, hooks)
   self.hooks = hooks or ddp:hooks()
   for _, e in ipairs(self.entries) do
      if e.child then e.child:bind(ddp, self.hooks) end
   end
end

-- Own parameter names, for the hooks.
function Module:own_names()
   local names = {}
   for _, e in ipairs(self.entries) do if e.spec then names[#names + 1] = e.spec.name end end
   return names
end

-- Makes the module's own parameters (and in backward their gradients) reachable through
-- self.w / self.g until release. reuse: a use out of the pass's order (a tied weight).
function Module:acquire(pass, reuse)
   local h = self.hooks
   for _, e in ipairs(self.entries) do
      if e.spec then
         local w, g = h.acquire(e.spec.name, pass, reuse)
         self.w[e.spec.short] = w
         self.g[e.spec.short] = g
      end
   end
end

function Module:release()
   for _, e in ipairs(self.entries) do
      if e.spec then self.hooks.release(e.spec.name) end
   end
end

function Module:ready(short) self.hooks.ready(self.prefix .. short) end

-- Activation buffers per (rows) shape, allocated once.
function Module:buffer(key, n)
   self.buffers = self.buffers or {}
   local b = self.buffers[key]
   if b == nil or b.n < n then
      local owner = self.prefix ~= "" and self.prefix:gsub("%.$", "") or "the model"
      b = { n = n, data = floats(n, ("'%s' of %s"):format(key, owner)) }
      self.buffers[key] = b
   end
   return b.data
end

-- ---- Linear ------------------------------------------------------------------------------------

local Linear = class(Module)
nn.Linear = Linear

-- Linear(prefix, in, out, bias): weight {out, in}, bias {out}.
function Linear.new(prefix, n_in, n_out, bias)
   local self = setmetatable({}, Linear):init(prefix)
   self.n_in, self.n_out, self.has_bias = n_in, n_out, bias
   self:declare("weight", { n_out, n_in }, "matrix")
   if bias then self:declare("bias", { n_out }, "bias") end
   return self
end

-- input: float* [n, in]; returns float* [n, out]
function Linear:forward(x, n)
   self:acquire("forward")
   local y = self:buffer("y", n * self.n_out)
   lib.lw_linear_forward(y, x, self.w.weight, self.has_bias and self.w.bias or nil, n, self.n_in,
      self.n_out)
   self:release()
   return y
end

-- Accumulates into dx (float* [n, in], may be nil) and the parameter gradients.
function Linear:backward(x, dy, dx, n)
   self:acquire("backward")
   lib.lw_linear_backward(dx, self.g.weight, self.has_bias and self.g.bias or nil, dy, x,
      self.w.weight, n, self.n_in, self.n_out)
   self:release()
   self:ready("weight")
   if self.has_bias then self:ready("bias") end
end

-- ---- Embedding: token + position ---------------------------------------------------------------

local Embedding = class(Module)
nn.Embedding = Embedding

-- Embedding(vocab, c, seq_len, shared): wte {vocab, c} (the LM head too when shared) and
-- wpe {seq_len, c}, named as in GPT-2.
function Embedding.new(vocab, c, seq_len, shared)
   local self = setmetatable({}, Embedding):init("")
   self.vocab, self.c = vocab, c
   self:declare("wte.weight", { vocab, c }, "embedding", { shared_embedding = shared })
   self:declare("wpe.weight", { seq_len, c }, "embedding")
   return self
end

-- tokens: int32_t* [b*t] -> float* [b*t, c]
function Embedding:forward(tokens, b, t)
   self:acquire("forward")
   local y = self:buffer("y", b * t * self.c)
   lib.lw_embedding_forward(y, tokens, self.w["wte.weight"], self.w["wpe.weight"], b, t, self.c)
   self:release()
   return y
end

-- Accumulates into the embedding gradients; position first, then the token table, which a
-- shared LM head has already added to.
function Embedding:backward(tokens, dy, b, t)
   self:acquire("backward")
   lib.lw_embedding_backward(self.g["wte.weight"], self.g["wpe.weight"], dy, tokens, b, t, self.c)
   self:release()
   self:ready("wpe.weight")
   self:ready("wte.weight")
end

-- ---- LayerNorm -----------------------------------------------------------------------------------

local LayerNorm = class(Module)
nn.LayerNorm = LayerNorm

function LayerNorm.new(prefix, c, bias)
   local self = setmetatable({}, LayerNorm):init(prefix)
   self.c, self.has_bias = c, bias
   self:declare("weight", { c }, "norm")
   if bias then self:declare("bias", { c }, "bias") end
   return self
end

function LayerNorm:forward(x, n)
   self:acquire("forward")
   local y = self:buffer("y", n * self.c)
   self.mean, self.rstd = self:buffer("mean", n), self:buffer("rstd", n)
   lib.lw_layernorm_forward(y, self.mean, self.rstd, x, self.w.weight,
      self.has_bias and self.w.bias or nil, n, self.c, 1e-5)
   self:release()
   return y
end

function LayerNorm:backward(x, dy, dx, n)
   self:acquire("backward")
   lib.lw_layernorm_backward(dx, self.g.weight, self.has_bias and self.g.bias or nil, dy, x,
      self.w.weight, self.mean, self.rstd, n, self.c)
   self:release()
   self:ready("weight")
   if self.has_bias then self:ready("bias") end
end

-- ---- GELU --------------------------------------------------------------------------------------

local GELU = class(Module)
nn.GELU = GELU

function GELU.new(width) return setmetatable({}, GELU):init(""):with_width(width) end
function GELU:with_width(w) self.width = w return self end

function GELU:forward(x, n)
   local y = self:buffer("y", n * self.width)
   lib.lw_gelu_forward(y, x, n * self.width)
   return y
end

function GELU:backward(x, dy, dx, n) lib.lw_gelu_backward(dx, dy, x, n * self.width) end

-- ---- CausalSelfAttention -------------------------------------------------------------------------

local Attention = class(Module)
nn.CausalSelfAttention = Attention

function Attention.new(prefix, c, n_head, bias)
   local self = setmetatable({}, Attention):init(prefix)
   self.c, self.n_head = c, n_head
   self.qkv = self:add(Linear.new(prefix .. "qkv.", c, 3 * c, bias))
   self.proj = self:add(Linear.new(prefix .. "proj.", c, c, bias))
   return self
end

-- x: float* [b*t, c] -> float* [b*t, c]
function Attention:forward(x, b, t)
   local n = b * t
   self.qkv_out = self.qkv:forward(x, n)
   self.att = self:buffer("att", b * self.n_head * t * t)
   self.y = self:buffer("y", n * self.c)
   lib.lw_attention_forward(self.y, self.att, self.qkv_out, b, t, self.c, self.n_head)
   return self.proj:forward(self.y, n)
end

function Attention:backward(x, dout, dx, b, t)
   local n, c = b * t, self.c
   local dy, dqkv = self:buffer("dy", n * c), self:buffer("dqkv", n * 3 * c)
   zero(dy, n * c)
   self.proj:backward(self.y, dout, dy, n)
   zero(dqkv, n * 3 * c)
   lib.lw_attention_backward(dqkv, self:buffer("scratch", t * t), dy, self.qkv_out, self.att, b, t,
      c, self.n_head)
   self.qkv:backward(x, dqkv, dx, n)
end

-- ---- MLP ---------------------------------------------------------------------------------------

local MLP = class(Module)
nn.MLP = MLP

function MLP.new(prefix, c, bias)
   local self = setmetatable({}, MLP):init(prefix)
   self.c = c
   self.fc = self:add(Linear.new(prefix .. "fc.", c, 4 * c, bias))
   self.gelu = GELU.new(4 * c)
   self.proj = self:add(Linear.new(prefix .. "proj.", 4 * c, c, bias))
   return self
end

function MLP:forward(x, n)
   self.h = self.fc:forward(x, n)
   self.a = self.gelu:forward(self.h, n)
   return self.proj:forward(self.a, n)
end

function MLP:backward(x, dout, dx, n)
   local w = 4 * self.c
   local da, dh = self:buffer("da", n * w), self:buffer("dh", n * w)
   zero(da, n * w)
   self.proj:backward(self.a, dout, da, n)
   zero(dh, n * w)
   self.gelu:backward(self.h, da, dh, n)
   self.fc:backward(x, dh, dx, n)
end

-- ---- Block: x + attn(ln_1(x)), then + mlp(ln_2(.)) ------------------------------------------

local Block = class(Module)
nn.Block = Block

function Block.new(prefix, c, n_head, bias)
   local self = setmetatable({}, Block):init(prefix)
   self.c = c
   self.ln_1 = self:add(LayerNorm.new(prefix .. "ln_1.", c, bias))
   self.attn = self:add(Attention.new(prefix .. "attn.", c, n_head, bias))
   self.ln_2 = self:add(LayerNorm.new(prefix .. "ln_2.", c, bias))
   self.mlp = self:add(MLP.new(prefix .. "mlp.", c, bias))
   return self
end

function Block:forward(x, b, t)
   local n, c = b * t, self.c
   self.x = x
   self.a_in = self.ln_1:forward(x, n)
   local a = self.attn:forward(self.a_in, b, t)
   self.mid = self:buffer("mid", n * c)
   lib.lw_vec_add(self.mid, x, a, n * c)
   self.m_in = self.ln_2:forward(self.mid, n)
   local m = self.mlp:forward(self.m_in, n)
   local y = self:buffer("y", n * c)
   lib.lw_vec_add(y, self.mid, m, n * c)
   return y
end

-- dout: gradient of the block output; accumulates into dx.
function Block:backward(dout, dx, b, t)
   local n, c = b * t, self.c
   local dm, dmid, da = self:buffer("dm", n * c), self:buffer("dmid", n * c), self:buffer("da", n * c)
   zero(dm, n * c)
   self.mlp:backward(self.m_in, dout, dm, n)
   ffi.copy(dmid, dout, 4 * n * c) -- the residual path
   self.ln_2:backward(self.mid, dm, dmid, n)
   zero(da, n * c)
   self.attn:backward(self.a_in, dmid, da, b, t)
   lib.lw_vec_add(dx, dx, dmid, n * c)
   self.ln_1:backward(self.x, da, dx, n)
end

-- ---- GPT ---------------------------------------------------------------------------------------

local GPT = class(Module)
nn.GPT = GPT

local GPT_DEFAULTS = { vocab = 50304, seq_len = 1024, tied = true, bias = false }

-- GPT{ n_layer, n_embd, n_head, vocab, seq_len, tied, bias }: the same parameters, names and
-- order as lw.arch.gpt for the same config.
function GPT.new(cfg)
   local self = setmetatable({}, GPT):init("")
   local o = {}
   for k, v in pairs(GPT_DEFAULTS) do o[k] = v end
   for k, v in pairs(cfg) do o[k] = v end
   assert(o.n_embd % o.n_head == 0, "nn.GPT: n_embd must be divisible by n_head")
   self.cfg = o
   local c = o.n_embd
   self.embedding = self:add(Embedding.new(o.vocab, c, o.seq_len, o.tied))
   self.blocks = {}
   for i = 0, o.n_layer - 1 do
      self.blocks[i + 1] = self:add(Block.new("h." .. i .. ".", c, o.n_head, o.bias))
   end
   self.ln_f = self:add(LayerNorm.new("ln_f.", c, o.bias))
   if not o.tied then self:declare("lm_head.weight", { o.vocab, c }, "output") end
   return self
end

local function check_tokens(tokens, n, vocab, what)
   for i = 0, n - 1 do
      local v = tokens[i]
      if v < 0 or v >= vocab then
         error(("nn.GPT: %s %d at position %d is outside [0, %d)"):format(what, v, i, vocab), 0)
      end
   end
end

-- Forward over tokens (int32_t* [b*t]); with targets (int32_t*, entries < 0 ignored) returns
-- the mean cross-entropy loss. Probabilities of the next token stay in self.probs [b*t, vocab].
function GPT:forward(tokens, targets, b, t)
   local o, c = self.cfg, self.cfg.n_embd
   local n = b * t
   if t > o.seq_len then
      error(("nn.GPT: sequence of %d exceeds seq_len %d"):format(t, o.seq_len), 0)
   end
   check_tokens(tokens, n, o.vocab, "token")
   self.tokens, self.targets, self.b, self.t = tokens, targets, b, t
   local x = self.embedding:forward(tokens, b, t)
   for _, block in ipairs(self.blocks) do x = block:forward(x, b, t) end
   self.x_last = x
   self.h = self.ln_f:forward(x, n)
   self.probs = self:buffer("probs", n * o.vocab)
   self.losses = self:buffer("losses", n)
   -- the LM head's turn comes last in forward; tied, it is the embedding read again
   local head_owner = o.tied and self.embedding or self
   head_owner:acquire("forward", o.tied)
   local head = o.tied and self.embedding.w["wte.weight"] or self.w["lm_head.weight"]
   local none = self:buffer("no_targets", n)
   local tg = targets or ffi.cast("int32_t *", none)
   if targets == nil then ffi.fill(none, 4 * n, 0xff) end -- all -1: ignored
   local loss = lib.lw_cross_entropy_forward(self.probs, self.losses, self.h, head, tg, n, c,
      o.vocab)
   head_owner:release()
   return loss
end

-- Backward of loss_scale * (the loss of the last forward); accumulates parameter gradients and
-- reports each complete gradient through the hooks, in backprop order.
function GPT:backward(loss_scale)
   local o, c = self.cfg, self.cfg.n_embd
   local b, t = self.b, self.t
   local n = b * t
   local head_owner = o.tied and self.embedding or self
   head_owner:acquire("backward", o.tied)
   local head_w = o.tied and self.embedding.w["wte.weight"] or self.w["lm_head.weight"]
   local head_g = o.tied and self.embedding.g["wte.weight"] or self.g["lm_head.weight"]
   local dh = self:buffer("dh", n * c)
   zero(dh, n * c)
   lib.lw_cross_entropy_backward(dh, head_g, self.probs, self.h, head_w, self.targets, n, c,
      o.vocab, loss_scale or 1)
   head_owner:release()
   if not o.tied then self:ready("lm_head.weight") end
   local dx = self:buffer("dx", n * c)
   zero(dx, n * c)
   self.ln_f:backward(self.x_last, dh, dx, n)
   local dnext = self:buffer("dx2", n * c)
   for i = #self.blocks, 1, -1 do
      zero(dnext, n * c)
      self.blocks[i]:backward(dx, dnext, b, t)
      dx, dnext = dnext, dx
   end
   self.embedding:backward(self.tokens, dx, b, t)
end

-- Next-token probabilities at row `row` (0-based) of the last forward: float* [vocab].
function GPT:next_probs(row) return self.probs + row * self.cfg.vocab end

return nn
