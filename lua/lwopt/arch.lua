-- Parameter specs (name, shape {out, in}, dtype, role) for GPT-2, LLaMA and LLaMA-style MoE models,
-- in forward order; no tensors are allocated here; layout and routing consume the specs.
-- GPT-2's are its modules' declarations (lw.models), also under tensor parallelism: one TP
-- rank's shards. LLaMA's and the MoE's are written here, for layouts of their sizes.

local errors = require("lwopt.errors")
local fields = require("lwopt.fields")
local models = require("lwopt.models")

local arch = {}

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

-- Returns a new table of checked values with defaults filled, or nil and a message.
local function check_config(who, cfg, list)
   local c, err = fields.check(who, cfg, list)
   if not c then return nil, err end
   if c.n_embd % c.n_head ~= 0 then
      return nil, string.format("%s: n_embd (%d) must be divisible by n_head (%d)",
                                who, c.n_embd, c.n_head)
   end
   if c.n_kv_head > c.n_head then
      return nil, string.format("%s: n_kv_head (%d) must be <= n_head (%d)",
                                who, c.n_kv_head, c.n_head)
   end
   if c.n_head % c.n_kv_head ~= 0 then
      return nil, string.format("%s: n_head (%d) must be divisible by n_kv_head (%d)",
                                who, c.n_head, c.n_kv_head)
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

-- arch.gpt{ the fields of lw.nn.GPT's config (lw.models' gpt), dtype, tp, tp_rank }: the
-- specs lw.nn.GPT declares for that config, from its modules (lw.models.specs): with tp = t
-- above 1 (a dense model), TP rank tp_rank's shards: column-parallel weights {out / t, in}
-- (attn.qkv with blocks 3: this rank's heads' Q, K and V; mlp.fc) and their biases,
-- row-parallel weights {out, in / t} (attn.proj, mlp.proj), the vocabulary-parallel token
-- table (and untied LM head) {ceil(vocab / t), n_embd} (the vocabulary padded to a multiple of
-- t), each with tp = { dim, blocks } and full_shape (lw.tp says what they mean); the norms, the
-- position table and the row-parallel biases whole, without a tp field.
function arch.gpt(cfg)
   local ok, specs = pcall(models.specs, "gpt", cfg, "lw.arch.gpt")
   if not ok then errors.misuse(nil, "%s", specs) end
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
