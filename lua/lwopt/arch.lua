-- Parameter specs (name, shape {out, in}, dtype, role) for GPT-2, LLaMA and LLaMA-style MoE models,
-- in forward order. Pure Lua: no tensors are allocated here; layout and routing consume the specs.
-- GPT-2 also under tensor parallelism: one TP rank's shards, as lw.nn.GPT declares them.

local tp_mod = require("lwopt.tp")
local errors = require("lwopt.errors")

local arch = {}

local DTYPES = { f32 = true, bf16 = true, f16 = true }

-- Field tables: { key, kind, default }. kind is "size" (positive integer), "count" (integer >=
-- 0), "coef" (finite number >= 0), "bool" or "dtype"; no default means required, a function
-- default is computed from the fields checked before it.
-- Checked in list order so the first error reported is deterministic.
-- n_expert > 0: every layer's MLP is a mixture of experts, as lw.nn.MoE declares it (a router
-- {n_expert, n_embd}, n_expert GELU MLPs of expert_hidden, optionally a shared one); topk and
-- aux_coef shape no parameter but are accepted, so that one config serves lw.nn.GPT and this.
local GPT_FIELDS = {
   { "n_layer", "size" }, { "n_embd", "size" }, { "n_head", "size" },
   { "vocab", "size", 50304 }, { "seq_len", "size", 1024 },
   { "tied", "bool", true }, { "bias", "bool", false },
   { "mlp_hidden", "size", function(c) return 4 * c.n_embd end },
   { "n_expert", "count", 0 }, { "topk", "size", 2 },
   { "expert_hidden", "size", function(c) return 4 * c.n_embd end },
   { "aux_coef", "coef", 0.01 }, { "shared_expert", "bool", false },
   { "router_muon", "bool", false }, { "dtype", "dtype", "f32" },
   { "tp", "size", 1 }, { "tp_rank", "count", 0 },
}

local LLAMA_FIELDS = {
   { "n_layer", "size" }, { "n_embd", "size" }, { "n_head", "size" },
   { "n_kv_head", "size", function(c) return c.n_head end }, { "ffn_hidden", "size" },
   { "vocab", "size", 32000 }, { "tied", "bool", false }, { "fused", "bool", false },
   { "dtype", "dtype", "f32" },
}

-- ffn_hidden is accepted (the MoE config is a LLaMA config plus expert fields) but unused:
-- every layer's dense MLP is replaced by the experts.
local MOE_FIELDS = {
   { "n_layer", "size" }, { "n_embd", "size" }, { "n_head", "size" },
   { "n_kv_head", "size", function(c) return c.n_head end },
   { "ffn_hidden", "size", function() return nil end },
   { "n_expert", "size" }, { "expert_hidden", "size" },
   { "vocab", "size", 32000 }, { "tied", "bool", false }, { "fused", "bool", false },
   { "router_muon", "bool", false }, { "dtype", "dtype", "f32" },
}

local function show(v)
   if type(v) == "string" then return string.format("%q", v) end
   return tostring(v)
end

local function is_size(v)
   -- The upper bound also rejects inf (floor(inf) == inf) and keeps numel exact in a double.
   return type(v) == "number" and v == math.floor(v) and v > 0 and v < 2 ^ 53
end

-- Returns a new table of checked values with defaults filled, or nil and a message.
local function check_config(who, cfg, fields)
   if type(cfg) ~= "table" then
      return nil, string.format("%s: config must be a table, got %s", who, type(cfg))
   end
   local known = {}
   for _, f in ipairs(fields) do known[f[1]] = true end
   -- Sorted so that with several typos the reported one does not depend on pairs() order.
   local unknown = {}
   for k in pairs(cfg) do
      if not known[k] then unknown[#unknown + 1] = tostring(k) end
   end
   if #unknown > 0 then
      table.sort(unknown)
      return nil, string.format("%s: unknown field '%s'", who, unknown[1])
   end

   local c = {}
   for _, f in ipairs(fields) do
      local key, kind, default = f[1], f[2], f[3]
      local v = cfg[key]
      if v == nil then
         if default == nil then
            return nil, string.format("%s: missing required field '%s'", who, key)
         elseif type(default) == "function" then
            v = default(c)
         else
            v = default
         end
      end
      if v ~= nil then
         if kind == "size" and not is_size(v) then
            return nil, string.format("%s: %s (%s) must be a positive integer", who, key, show(v))
         elseif kind == "count" and not (v == 0 or is_size(v)) then
            return nil, string.format("%s: %s (%s) must be an integer >= 0", who, key, show(v))
         elseif kind == "coef" and not (type(v) == "number" and v >= 0 and v < math.huge) then
            return nil, string.format("%s: %s (%s) must be a finite number >= 0", who, key,
                                      show(v))
         elseif kind == "bool" and type(v) ~= "boolean" then
            return nil, string.format("%s: %s (%s) must be a boolean", who, key, show(v))
         elseif kind == "dtype" and not DTYPES[v] then
            return nil, string.format("%s: dtype (%s) must be one of \"f32\", \"bf16\", \"f16\"",
                                      who, show(v))
         end
      end
      c[key] = v
   end

   if c.n_embd % c.n_head ~= 0 then
      return nil, string.format("%s: n_embd (%d) must be divisible by n_head (%d)",
                                who, c.n_embd, c.n_head)
   end
   if c.topk and c.n_expert > 0 and c.topk > c.n_expert then
      return nil, string.format("%s: topk (%d) must be <= n_expert (%d)", who, c.topk,
                                c.n_expert)
   end
   if c.n_kv_head then
      if c.n_kv_head > c.n_head then
         return nil, string.format("%s: n_kv_head (%d) must be <= n_head (%d)",
                                   who, c.n_kv_head, c.n_head)
      end
      if c.n_head % c.n_kv_head ~= 0 then
         return nil, string.format("%s: n_head (%d) must be divisible by n_kv_head (%d)",
                                   who, c.n_head, c.n_kv_head)
      end
   end
   return c
end

-- Appends one spec; every spec carries both booleans so consumers never test for nil.
local function add(specs, c, name, shape, role, extra)
   local s = { name = name, shape = shape, dtype = c.dtype, role = role,
               shared_embedding = false, expert = false }
   if extra then
      for k, v in pairs(extra) do s[k] = v end
   end
   specs[#specs + 1] = s
end

-- arch.gpt{ n_layer, n_embd, n_head, vocab, seq_len, tied, bias, n_expert, ..., tp, tp_rank }:
-- with tp = t above 1 (a dense model), TP rank tp_rank's shards: column-parallel
-- weights {out / t, in} (attn.qkv with blocks 3: this rank's heads' Q, K and V; mlp.fc) and their
-- biases, row-parallel weights {out, in / t} (attn.proj, mlp.proj), the vocabulary-parallel
-- token table (and untied LM head) {ceil(vocab / t), n_embd} (the vocabulary padded to a multiple
-- of t), each with tp = { dim, blocks } and full_shape (lw.tp says what they mean); the norms,
-- the position table and the row-parallel biases whole, without a tp field. attn.qkv.weight
-- carries qkv = { groups = 1, rows = { n_embd / t, n_embd / t, n_embd / t } } at every tp.
function arch.gpt(cfg)
   local c, err = check_config("lw.arch.gpt", cfg, GPT_FIELDS)
   if not c then errors.misuse(nil, "%s", err) end
   local specs, n = {}, c.n_embd
   local t = c.tp
   if c.tp_rank >= t then
      errors.misuse("lw.arch.gpt", "tp_rank (%d) must be below tp (%d)", c.tp_rank, t)
   end
   local bad = tp_mod.check(t, nil, { n_head = c.n_head, n_embd = n, hidden = c.mlp_hidden,
      vocab = c.vocab, pad_vocab = true, n_expert = c.n_expert })
   if bad then errors.misuse("lw.arch.gpt", "%s", bad) end
   local function sharded(dim, blocks, full, more)
      local x = { tp = { dim = dim, blocks = blocks }, full_shape = full }
      for k, v in pairs(more or {}) do x[k] = v end
      return x
   end
   -- column- and row-parallel linears (plain ones at tp 1); weight_extra: the weight's alone
   local function column(name, n_out, n_in, blocks, weight_extra)
      if t == 1 then
         add(specs, c, name .. ".weight", { n_out, n_in }, "matrix", weight_extra)
         if c.bias then add(specs, c, name .. ".bias", { n_out }, "bias") end
         return
      end
      add(specs, c, name .. ".weight", { n_out / t, n_in }, "matrix",
         sharded(0, blocks, { n_out, n_in }, weight_extra))
      if c.bias then
         add(specs, c, name .. ".bias", { n_out / t }, "bias", sharded(0, blocks, { n_out }))
      end
   end
   local function row(name, n_out, n_in)
      add(specs, c, name .. ".weight", { n_out, n_in / t }, "matrix",
         t > 1 and sharded(1, 1, { n_out, n_in }) or nil)
      if c.bias then add(specs, c, name .. ".bias", { n_out }, "bias") end
   end
   local vocab_rows = math.ceil(c.vocab / t)
   local vocab_extra = t > 1 and sharded(0, 1, { t * vocab_rows, n }) or {}
   if t > 1 then vocab_extra.tp.rows = c.vocab end

   -- A linear layer: weight {out, in} (role "matrix" unless given), then its bias right after
   -- it when the model has biases; extra: fields of both specs.
   local function linear(name, n_out, n_in, role, extra, no_bias)
      add(specs, c, name .. ".weight", { n_out, n_in }, role or "matrix", extra)
      if c.bias and not no_bias then add(specs, c, name .. ".bias", { n_out }, "bias", extra) end
   end
   -- lw.nn.MoE's parameters: the router (no bias; off Muon unless router_muon), the experts
   -- (role "expert", in expert buffers), the shared expert (dense)
   local function moe(p)
      linear(p .. "router", c.n_expert, n, "matrix",
             (not c.router_muon) and { use_muon = false } or nil, true)
      for e = 0, c.n_expert - 1 do
         local x = p .. "experts." .. e .. "."
         linear(x .. "fc", c.expert_hidden, n, "expert", { expert = true })
         linear(x .. "proj", n, c.expert_hidden, "expert", { expert = true })
      end
      if c.shared_expert then
         linear(p .. "shared.fc", c.expert_hidden, n)
         linear(p .. "shared.proj", n, c.expert_hidden)
      end
   end
   local function layer_norm(name)
      add(specs, c, name .. ".weight", { n }, "norm")
      if c.bias then add(specs, c, name .. ".bias", { n }, "bias") end
   end

   local wte_extra = { shared_embedding = c.tied }
   for k, v in pairs(vocab_extra) do wte_extra[k] = v end
   add(specs, c, "wte.weight", { vocab_rows, n }, "embedding", wte_extra)
   add(specs, c, "wpe.weight", { c.seq_len, n }, "embedding")
   for i = 0, c.n_layer - 1 do
      local p = "h." .. i .. "."
      layer_norm(p .. "ln_1")
      column(p .. "attn.qkv", 3 * n, n, 3, { qkv = { groups = 1, rows = { n / t, n / t, n / t } } })
      row(p .. "attn.proj", n, n)
      layer_norm(p .. "ln_2")
      if c.n_expert > 0 then
         moe(p .. "moe.")
      else
         column(p .. "mlp.fc", c.mlp_hidden, n, 1)
         row(p .. "mlp.proj", n, c.mlp_hidden)
      end
   end
   layer_norm("ln_f")
   if not c.tied then add(specs, c, "lm_head.weight", { vocab_rows, n }, "output", vocab_extra) end
   return specs
end

-- Shared by llama and moe: embeddings, attention and norms are identical; mlp(prefix) appends
-- the feed-forward block of one layer.
local function llama_like(c, mlp)
   local specs, n = {}, c.n_embd
   local hd = n / c.n_head
   local q_out, kv_out = c.n_head * hd, c.n_kv_head * hd

   add(specs, c, "embed.weight", { c.vocab, n }, "embedding", { shared_embedding = c.tied })
   for i = 0, c.n_layer - 1 do
      local p = "layers." .. i .. "."
      add(specs, c, p .. "attn_norm.weight", { n }, "norm")
      if c.fused then
         add(specs, c, p .. "attn.qkv.weight", { q_out + 2 * kv_out, n }, "matrix")
      else
         add(specs, c, p .. "attn.q.weight", { q_out, n }, "matrix")
         add(specs, c, p .. "attn.k.weight", { kv_out, n }, "matrix")
         add(specs, c, p .. "attn.v.weight", { kv_out, n }, "matrix")
      end
      add(specs, c, p .. "attn.o.weight", { n, q_out }, "matrix")
      add(specs, c, p .. "ffn_norm.weight", { n }, "norm")
      mlp(specs, p)
   end
   add(specs, c, "norm.weight", { n }, "norm")
   if not c.tied then add(specs, c, "lm_head.weight", { c.vocab, n }, "output") end
   return specs
end

-- A SwiGLU feed-forward block: gate and up (or fused gate_up), then down.
local function swiglu(specs, c, p, hidden, role, extra)
   local n = c.n_embd
   if c.fused then
      add(specs, c, p .. "gate_up.weight", { 2 * hidden, n }, role, extra)
   else
      add(specs, c, p .. "gate.weight", { hidden, n }, role, extra)
      add(specs, c, p .. "up.weight", { hidden, n }, role, extra)
   end
   add(specs, c, p .. "down.weight", { n, hidden }, role, extra)
end

function arch.llama(cfg)
   local c, err = check_config("lw.arch.llama", cfg, LLAMA_FIELDS)
   if not c then errors.misuse(nil, "%s", err) end
   return llama_like(c, function(specs, p)
      swiglu(specs, c, p .. "mlp.", c.ffn_hidden, "matrix")
   end)
end

function arch.moe(cfg)
   local c, err = check_config("lw.arch.moe", cfg, MOE_FIELDS)
   if not c then errors.misuse(nil, "%s", err) end
   -- The router is tiny and its logits feed a softmax/top-k; orthogonalised updates are not
   -- wanted there unless the caller asks for them.
   local router_extra = (not c.router_muon) and { use_muon = false } or nil
   local expert_extra = { expert = true }
   return llama_like(c, function(specs, p)
      add(specs, c, p .. "moe.router.weight", { c.n_expert, c.n_embd }, "matrix", router_extra)
      for e = 0, c.n_expert - 1 do
         swiglu(specs, c, p .. "moe.experts." .. e .. ".", c.expert_hidden, "expert",
                expert_extra)
      end
   end)
end

-- Total element count of a list of specs.
function arch.numel(specs)
   local total = 0
   for _, s in ipairs(specs) do
      local k = 1
      for _, d in ipairs(s.shape) do k = k * d end
      total = total + k
   end
   return total
end

return arch
