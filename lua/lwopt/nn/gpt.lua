-- nn/gpt.lua: GPT, GPT-2's model: embedding, blocks, final LayerNorm and an LM head (tied to
-- the token embedding, or its own matrix) with the softmax cross-entropy over
-- lw_cross_entropy_forward / _backward, in chunks of rows; with n_expert > 0 every block's MLP
-- is a mixture of experts (nn/moe.lua). Its top level has a loss API instead of the module
-- contract of nn/module.lua (which says why); everything under it follows the contract. Under
-- tensor parallelism (cfg.tp) the embedding and the LM head are vocabulary-parallel: the head's
-- softmax statistics are gathered over the TP group (lw_cross_entropy_partial_forward,
-- _combine) and its input gradient all-reduced.
local ffi = require("ffi")
local C = require("lwopt.C")
local base = require("lwopt.nn.module")
local tp_mod = require("lwopt.tp")
local Embedding = require("lwopt.nn.embedding")
local VocabParallelEmbedding = require("lwopt.nn.vocab_embedding")
local Block = require("lwopt.nn.block")
local ResidualScalars = require("lwopt.nn.residual_scalars")
local errors = require("lwopt.errors")
local fields = require("lwopt.fields")

local lib = C.lib
local zero = base.zero
local check = base.check

local GPT = base.class(base.Module)

local fail = errors.failer("nn.GPT")

-- The model's config fields (lwopt/fields.lua), the registry's (lwopt/models/gpt.lua): the
-- shape, then what changes how it runs but not its parameters (recompute_gelu, activations).
GPT.fields = {
   { "n_layer", "size" }, { "n_embd", "size" }, { "n_head", "size" },
   { "vocab", "size", 50304 }, { "seq_len", "size", 1024 },
   { "tied", "bool", true }, { "bias", "bool", false },
   { "mlp_hidden", "size", function(c) return 4 * c.n_embd end },
   { "n_expert", "count", 0 }, { "topk", "size", 2 },
   { "expert_hidden", "size", function(c) return 4 * c.n_embd end },
   { "aux_coef", "coef", 0.01 }, { "shared_expert", "bool", false },
   { "router_muon", "bool", false },
   { "recompute_gelu", "bool", false },
   { "activations", "choice", "fp32", { "fp32", "bf16" } },
   -- the parts (docs/parts.md): GPT-2's by default; LLaMA's and nanochat's models choose others
   { "norm", "choice", "layernorm", { "layernorm", "rmsnorm" } },
   { "norm_gain", "bool", true }, { "norm_eps", "coef", 1e-5 },
   { "position", "choice", "learned", { "learned", "rotary" } },
   { "rope_base", "coef", 10000 },
   { "rope_pairing", "choice", "halves", { "halves", "interleaved" } },
   { "activation", "choice", "gelu", { "gelu", "relu2", "swiglu" } },
   { "n_kv_head", "size", function(c) return c.n_head end },
   { "qk_norm", "bool", false }, { "window", "count", 0 },
   -- nanochat's: rotary turning the other way, value embeddings on every other layer (the last
   -- included) with their gate's input channels and scale, per-layer residual scalars
   { "rope_reverse", "bool", false },
   { "value_embeds", "bool", false }, { "ve_gate_channels", "size", 12 },
   { "ve_gate_scale", "coef", 3 }, { "resid_scalars", "bool", false },
   -- nanochat's: a window per layer (absent: `window` on every layer), the norm after the
   -- token embedding, the logits' softcap (0: none)
   { "window_pattern", "string", function() return nil end, "SL" },
   { "embed_norm", "bool", false }, { "softcap", "coef", 0 },
}

-- The groups a model is built over (not part of its description): lw.ep.groups's and
-- lw.tp.groups's tables, or false.
local RUN_FIELDS = { { "ep", "any", false }, { "tp", "any", false } }

-- The checks across fields of a config whose fields are each of their kind: nil or a message.
function GPT.check(c, who)
   if c.n_embd % c.n_head ~= 0 then
      return ("%s: n_embd (%d) must be divisible by n_head (%d)"):format(who, c.n_embd, c.n_head)
   end
   if c.n_expert > 0 and c.topk > c.n_expert then
      return ("%s: topk (%d) must be <= n_expert (%d)"):format(who, c.topk, c.n_expert)
   end
   if c.n_head % c.n_kv_head ~= 0 then
      return ("%s: n_kv_head (%d) must divide n_head (%d)"):format(who, c.n_kv_head, c.n_head)
   end
   if c.position == "rotary" and (c.n_embd / c.n_head) % 2 ~= 0 then
      return ("%s: rotary positions need an even head dim (n_embd / n_head = %d)"):format(who,
         c.n_embd / c.n_head)
   end
   if c.value_embeds and c.ve_gate_channels > c.n_embd then
      return ("%s: ve_gate_channels (%d) must be <= n_embd (%d): the gate reads the attention "
         .. "input's first channels"):format(who, c.ve_gate_channels, c.n_embd)
   end
   if c.window_pattern and c.window_pattern:find("S") and c.window == 0 then
      return ("%s: window_pattern '%s' has short-window layers (S) but window is 0: give "
         .. "window > 0"):format(who, c.window_pattern)
   end
   return nil
end

-- Whether layer i (0-based) of n_layer has value embeddings: every other layer, the last one
-- included (nanochat's has_ve).
function GPT.has_value_embeds(i, n_layer) return i % 2 == (n_layer - 1) % 2 end

-- Layer i's (0-based) attention window: `window` on every layer without a pattern; with one,
-- its character at i (tiled over the layers) says S, the window, or L, the full context (0),
-- and the last layer is always full. "L" or "" make every layer full.
function GPT.layer_window(c, i)
   local pattern = c.window_pattern
   if pattern == nil then return c.window end
   if pattern == "" or i == c.n_layer - 1 then return 0 end
   local k = i % #pattern + 1
   return pattern:sub(k, k) == "S" and c.window or 0
end

-- The config of every block's nn.MoE, or nil for a dense model (n_expert 0).
local function moe_config(o)
   if o.n_expert == 0 then return nil end
   return { n_expert = o.n_expert, topk = o.topk, expert_hidden = o.expert_hidden,
            aux_coef = o.aux_coef, shared_expert = o.shared_expert, router_muon = o.router_muon,
            ep = o.ep, activation = o.activation }
end

-- GPT{ n_layer, n_embd, n_head, vocab, seq_len, tied, bias, mlp_hidden, recompute_gelu,
-- activations, n_expert, topk, expert_hidden, aux_coef, shared_expert, router_muon, ep }: the
-- same parameters, names and order as lw.arch.gpt (mlp_hidden: the dense MLP's hidden size,
-- default 4 n_embd; recompute_gelu: the dense MLPs compute GELU's output again in backward
-- rather than keep it, MLP:set_recompute_gelu; activations "fp32" (default) or "bf16": the
-- activations that only feed matrix products, the attention or GELU kept in bf16,
-- Block:set_activations, and the LM head's logits in bf16 (its statistics still fp32); neither
-- changes the parameters)
-- for the same config (with ep, lw.ep.groups's table: only this EP rank's experts, by global
-- index, and their tokens exchanged within the EP group; nn/moe.lua). n_expert > 0 makes every
-- block's MLP a mixture of experts (nn.MoE) of the model's activation: n_expert experts of
-- hidden size expert_hidden (default 4 n_embd), each token routed to topk
-- (default 2) of them, a load-balancing loss weighted aux_coef (default 0.01), shared_expert
-- (default false) adding one dense MLP every token goes through, router_muon (default false)
-- leaving the router to the routing rules' Muon instead of AdamW. tp (lw.tp.groups's table, size
-- t above 1; a dense model only) makes the model this TP rank's shards, lw.arch.gpt{ tp = t,
-- tp_rank = r }'s specs: heads (with their value embeddings' columns and gate rows), MLP
-- channels and vocabulary rows split over the TP group (the vocabulary padded to a multiple of
-- t, the padding masked), norms and row-parallel biases whole.
-- nanochat's softcap, window_pattern and embed_norm: docs/parts.md (the defaults: none of them).
function GPT.new(cfg)
   local self = setmetatable({}, GPT):init("")
   local o, err = fields.check("nn.GPT", cfg, GPT.fields, RUN_FIELDS)
   err = err or GPT.check(o, "nn.GPT")
   if err then errors.raise(err) end
   if o.tp and o.tp.size > 1 then
      local bad = tp_mod.check(o.tp.size, nil, { n_head = o.n_head, n_embd = o.n_embd,
         hidden = o.mlp_hidden or 4 * o.n_embd, vocab = o.vocab, pad_vocab = true, n_expert = o.n_expert,
         ep = o.ep and o.ep.size or 1 })
      if bad then fail("%s", bad) end
      self.tp = o.tp
   end
   self.cfg = o
   local c = o.n_embd
   -- the LM head's vocabulary rows held here, and the first one's id
   self.head_rows, self.head_first = o.vocab, 0
   if self.tp then
      self.embedding = self:add(VocabParallelEmbedding.new(o.vocab, c, o.seq_len, o.tied, self.tp,
         o.position == "learned"))
      self.head_rows, self.head_first = self.embedding.rows, self.embedding.first
   else
      self.embedding = self:add(Embedding.new(o.vocab, c, o.seq_len, o.tied,
         o.position == "learned"))
   end
   -- the parts every block takes (docs/parts.md)
   local parts = { norm = o.norm, norm_gain = o.norm_gain, norm_eps = o.norm_eps,
      activation = o.activation }
   local rotary = o.position == "rotary" and { base = o.rope_base, pairing = o.rope_pairing,
      sign = o.rope_reverse and -1 or 1 }
   if o.resid_scalars then self.scalars = self:add(ResidualScalars.new(o.n_layer, c)) end
   -- nanochat's norm of the token embedding's output, before the first block
   if o.embed_norm then self.ln_e = self:add(Block.norm("ln_e.", c, o.bias, parts)) end
   self.blocks = {}
   self.block_inputs = {} -- each block's input in the last forward, for its backward
   self.mix_inputs = {} -- with residual scalars: what each layer's mix took, for its backward
   for i = 0, o.n_layer - 1 do
      local attention = { n_kv_head = o.n_kv_head, window = GPT.layer_window(o, i),
         qk_norm = o.qk_norm, rotary = rotary }
      if o.value_embeds and GPT.has_value_embeds(i, o.n_layer) then
         attention.value_embed = { vocab = o.vocab, channels = o.ve_gate_channels,
            scale = o.ve_gate_scale }
      end
      self.blocks[i + 1] = self:add(Block.new("h." .. i .. ".", c, o.n_head, o.bias,
         moe_config(o), self.tp, o.mlp_hidden, attention, parts))
   end
   local activations = ({ fp32 = lib.LW_DTYPE_F32, bf16 = lib.LW_DTYPE_BF16 })[o.activations]
   for _, block in ipairs(self.blocks) do
      if block.mlp then block.mlp:set_recompute_gelu(o.recompute_gelu) end
      block:set_activations(activations)
   end
   self.logits_dtype = activations
   self.ln_f = self:add(Block.norm("ln_f.", c, o.bias, parts))
   if not o.tied then
      self:declare("lm_head.weight", { self.head_rows, c }, "output", self.tp and
         { tp = { dim = 0, blocks = 1, rows = o.vocab },
           full_shape = { self.tp.size * self.head_rows, c } })
   end
   -- the LM head's weight, by short name in the module that owns it
   self.head_name = o.tied and "wte.weight" or "lm_head.weight"
   -- the LM head's kernels take its dtype (tied: the embedding's table, read so there too)
   self.stored_reads = { ["lm_head.weight"] = true }
   return self
end

local function check_tokens(tokens, n, vocab, what)
   for i = 0, n - 1 do
      local v = tokens[i]
      if v < 0 or v >= vocab then
         fail("%s %d at position %d is outside [0, %d)", what, v, i, vocab)
      end
   end
end

-- Runs kernel(owner, self, a1, a2) with the LM head's weight reachable in owner.w (owner.g in
-- backward). Tied, the owner is the embedding, read again out of the pass's order: its
-- gradient is complete only after the embedding's own backward, which reports it.
local function with_head(self, pass, kernel, a1, a2)
   if self.cfg.tied then
      return self.embedding:with_params_reused(pass, kernel, self, a1, a2)
   end
   return self:with_params(pass, kernel, self, a1, a2)
end

local loss_cell = ffi.new("double[1]")

local function head_forward(owner, self, n, tg)
   local o, c = self.cfg, self.cfg.n_embd
   local name = self.head_name
   check(lib.lw_cross_entropy_forward(self.stream, self.losses, self.lse, self.logits, self.h,
      owner.w[name], owner.dtype[name], self.logits_dtype, o.softcap, tg, n, c, o.vocab,
      loss_cell))
   return loss_cell[0]
end

local function head_backward(owner, self, dh, loss_scale)
   local o, c = self.cfg, self.cfg.n_embd
   local n = self.b * self.t
   local name = self.head_name
   check(lib.lw_cross_entropy_backward(self.stream, dh, owner.g[name], self.logits, self.h,
      owner.w[name], owner.dtype[name], self.logits_dtype, o.softcap, self.targets, self.lse, n,
      c, o.vocab, loss_scale or 1))
end

-- The vocabulary-parallel head (tp): this rank's softmax statistics into its slot of the
-- group's [t, 3, n], and its rows' backward (its share of dh).
local function head_forward_tp(owner, self, n, tg)
   local name = self.head_name
   check(lib.lw_cross_entropy_partial_forward(self.stream, self.stats + self.tp.rank * 3 * n,
      self.logits, self.h, owner.w[name], owner.dtype[name], self.logits_dtype, self.cfg.softcap,
      tg, n, self.cfg.n_embd, self.head_rows, self.head_first, self.cfg.vocab))
end

local function head_backward_tp(owner, self, dh, loss_scale)
   local name = self.head_name
   check(lib.lw_cross_entropy_partial_backward(self.stream, dh, owner.g[name], self.logits,
      self.h, owner.w[name], owner.dtype[name], self.logits_dtype, self.cfg.softcap, self.targets,
      self.lse, self.b * self.t, self.cfg.n_embd, self.head_rows, self.head_first, self.cfg.vocab,
      loss_scale or 1))
end

-- int32_t* of n tokens where the model's kernels read them: the host array itself on the CPU,
-- else a copy uploaded to the device (buffer `key`; the host array may be reused at once).
function GPT:on_device(host, n, key)
   if self.device == nil or lib.lw_device_is_host(self.device) then return host end
   local dev = self:int_buffer(key, n)
   check(lib.lw_device_copy(self.stream, dev, host, 4 * n, lib.LW_COPY_HOST_TO_DEVICE))
   return dev
end

-- Forward over tokens (host int32_t* [b*t]); with targets (host int32_t*, entries < 0 ignored)
-- returns the mean cross-entropy loss. The LM head runs in chunks of rows (never the b*t x
-- vocab logits at once on a GPU); next_probs gives a row's next-token distribution. With
-- experts, the returned loss is still the cross-entropy alone (what validation and the logs
-- compare across models); the layers' load-balancing losses, summed, are self.aux_loss, and
-- the objective backward differentiates is the sum of the two.
function GPT:forward(tokens, targets, b, t)
   local o = self.cfg
   local n = b * t
   if t > o.seq_len then
      fail("sequence of %d exceeds seq_len %d", t, o.seq_len)
   end
   check_tokens(tokens, n, o.vocab, "token")
   if targets == nil then
      targets = self:host_array("no_targets", "int32_t", n)
      ffi.fill(targets, 4 * n, 0xff) -- all -1: ignored
   end
   self.b, self.t = b, t
   self.tokens = self:on_device(tokens, n, "tokens")
   self.targets = self:on_device(targets, n, "targets")
   local x = self.embedding:forward(self.tokens, b, t)
   if self.ln_e then
      self.x_embed = x
      x = self.ln_e:forward(x, n)
   end
   self.aux_loss = 0
   if self.want_max_logits then -- every layer's heads' largest logits in one device array
      local nh = self.blocks[1].attn.n_head
      local all = self:buffer("head_max", #self.blocks * nh)
      for i, block in ipairs(self.blocks) do block.attn.head_max = all + (i - 1) * nh end
   end
   -- x0: what the residual scalars mix back in before every layer
   local scalars, x0 = self.scalars, x
   self.x0 = x0
   if scalars then scalars:hold("forward") end
   for i, block in ipairs(self.blocks) do
      if scalars then
         self.mix_inputs[i] = x
         x = scalars:forward(i, x, x0, n)
      end
      self.block_inputs[i] = x
      block.attn.tokens = self.tokens -- the value embeddings' lookup, if the layer has them
      x = block:forward(x, b, t)
      if block.moe then self.aux_loss = self.aux_loss + block.moe.aux_loss end
   end
   if scalars then scalars:let_go() end
   self.x_last = x
   self.h = self.ln_f:forward(x, n)
   self.logits = self:buffer("logits",
      tonumber(lib.lw_cross_entropy_scratch_floats(self.stream, n, self.head_rows)))
   self.losses = self:buffer("losses", n)
   self.lse = self:buffer("lse", n)
   -- the LM head's turn comes last in forward; tied, it is the embedding read again
   if not self.tp then return with_head(self, "forward", head_forward, n, self.targets) end
   local t = self.tp.size
   self.stats = self:buffer("stats", t * 3 * n)
   with_head(self, "forward", head_forward_tp, n, self.targets)
   tp_mod.allgather(self.tp, self.device, self.stats, t * 3 * n,
      "the LM head's softmax statistics")
   check(lib.lw_cross_entropy_combine(self.stream, self.losses, self.lse, self.stats, t,
      self.targets, n, o.vocab, loss_cell))
   return loss_cell[0]
end

-- Backward of loss_scale * (the loss of the last forward, plus self.aux_loss with experts);
-- accumulates parameter gradients and reports each complete gradient through the hooks, in
-- backprop order.
function GPT:backward(loss_scale)
   local c = self.cfg.n_embd
   local b, t = self.b, self.t
   local n = b * t
   local dh = self:buffer("dh", n * c)
   zero(dh, n * c, self.stream)
   if self.tp then
      with_head(self, "backward", head_backward_tp, dh, loss_scale)
      tp_mod.allreduce(self.tp, self.device, dh, n * c, "the LM head's input gradient")
   else
      with_head(self, "backward", head_backward, dh, loss_scale)
   end
   local dx = self:buffer("dx", n * c)
   zero(dx, n * c, self.stream)
   self.ln_f:backward(self.x_last, dh, dx, n)
   local dnext = self:buffer("dx2", n * c)
   local scalars, dx0 = self.scalars, nil
   if scalars then
      scalars:hold("backward")
      dx0 = self:buffer("dx0", n * c) -- the gradient every layer's mix sends to x0
      zero(dx0, n * c, self.stream)
   end
   for i = #self.blocks, 1, -1 do
      if self.blocks[i].moe then self.blocks[i].moe.aux_scale = loss_scale or 1 end
      zero(dnext, n * c, self.stream)
      self.blocks[i]:backward(self.block_inputs[i], dx, dnext, b, t)
      if scalars then -- dnext is the mix's output gradient: dx becomes its input's
         zero(dx, n * c, self.stream)
         scalars:backward(i, self.mix_inputs[i], self.x0, dnext, dx, dx0, n)
      else
         dx, dnext = dnext, dx
      end
   end
   if scalars then
      check(lib.lw_vec_add(self.stream, dx, dx, dx0, n * c))
      scalars:let_go()
   end
   if self.ln_e then
      zero(dnext, n * c, self.stream)
      self.ln_e:backward(self.x_embed, dx, dnext, n)
      dx = dnext
   end
   self.embedding:backward(self.tokens, dx, nil, b, t)
end

-- Whether forward measures every layer's heads' largest pre-softmax logits (off by default: the
-- kernels then skip them), which max_logits gives.
function GPT:set_max_logits(on)
   self.want_max_logits = on
   if not on then for _, block in ipairs(self.blocks) do block.attn.head_max = nil end end
end

-- The last forward's largest logit of each of this rank's heads (q . k / sqrt(head dim) over
-- its batch, as the attention kernel computes it; NaN where a row was): a host float* [n_layer
-- * heads], layer-major, valid until the next call, and the heads a layer (this rank's: n_head /
-- t under tensor parallelism). Needs set_max_logits(true) before that forward.
function GPT:max_logits()
   if not self.want_max_logits then
      errors.misuse("GPT:max_logits", "call set_max_logits(true) before the forward")
   end
   local nh = self.blocks[1].attn.n_head
   local n = #self.blocks * nh
   local h = self:host_array("head_max", "float", n)
   check(lib.lw_device_copy(self.stream, h, self:buffer("head_max", n), 4 * n,
      lib.LW_COPY_DEVICE_TO_HOST))
   return h, nh
end

-- Each layer's QK-clip target (Attention:qk_clip_target), in layer order.
function GPT:qk_clip_targets()
   local out = {}
   for i, block in ipairs(self.blocks) do out[i] = block.attn:qk_clip_target() end
   return out
end

-- Tokens routed to each expert in the last forward, per layer: { layer h.0's { expert 0, ..,
-- expert n_expert - 1 }, .. } (each token counts once at each of its topk experts, so a layer's
-- counts sum to b * t * topk); an empty list for a dense model.
function GPT:expert_counts()
   local out = {}
   for i, block in ipairs(self.blocks) do
      if block.moe then out[i] = block.moe:expert_counts() end
   end
   return out
end

-- The logits of one row into the device buffer dev (this rank's rows of the vocabulary, at its
-- place among the TP group's), from the LM head read again (a reuse: at ZeRO-3 it is gathered
-- again, collectively, so every rank must ask for the same rows).
local function row_logits(owner, self, row, dev)
   local c, rows = self.cfg.n_embd, self.head_rows
   check(lib.lw_linear_forward(self.stream, dev + (self.tp and self.tp.rank or 0) * rows,
      lib.LW_DTYPE_F32, self.h + row * c, lib.LW_DTYPE_F32, owner.w[self.head_name], owner.dtype[self.head_name],
      nil, 1, c, rows))
end

-- Next-token probabilities at row `row` (0-based) of the last forward: a host float* [vocab],
-- valid until the next call. Collective over the TP group under tensor parallelism.
function GPT:next_probs(row)
   local v = self.cfg.vocab
   local all = self.head_rows * (self.tp and self.tp.size or 1)
   local p = self:host_array("next_probs", "float", all)
   local owner = self.cfg.tied and self.embedding or self
   local dev = self:buffer("row_logits", all)
   owner:with_params_reused("forward", row_logits, self, row, dev)
   if self.tp then tp_mod.allgather(self.tp, self.device, dev, all, "the sampled row's logits") end
   -- capped as the loss caps them (the softcap kernel, in place)
   if self.cfg.softcap > 0 then
      check(lib.lw_softcap_forward(self.stream, dev, dev, all, self.cfg.softcap))
   end
   check(lib.lw_device_copy(self.stream, p, dev, 4 * v, lib.LW_COPY_DEVICE_TO_HOST))
   local m = p[0]
   for j = 1, v - 1 do if p[j] > m then m = p[j] end end
   local sum = 0
   for j = 0, v - 1 do
      local e = math.exp(p[j] - m)
      p[j], sum = e, sum + e
   end
   for j = 0, v - 1 do p[j] = p[j] / sum end
   return p
end

return GPT
