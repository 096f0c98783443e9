-- Specs for lua/lwopt/arch.lua and the specs lw.models declares: parameter names, shapes,
-- order, roles and totals of GPT-2, LLaMA and their mixtures of experts, and every config
-- validation error.

local arch = require("lwopt.arch")
local models = require("lwopt.models")

-- "name {d1,d2} role" per spec, so a whole model compares as one list.
local function summary(specs)
   local out = {}
   for i, s in ipairs(specs) do
      out[i] = string.format("%s {%s} %s", s.name, table.concat(s.shape, ","), s.role)
   end
   return out
end

local function by_name(specs)
   local t = {}
   for _, s in ipairs(specs) do t[s.name] = s end
   return t
end

-- A GPT with 1 layer, n_embd 8, 2 heads, vocab 16, seq_len 4.
local function tiny_gpt(extra)
   local cfg = { n_layer = 1, n_embd = 8, n_head = 2, vocab = 16, seq_len = 4 }
   for k, v in pairs(extra or {}) do cfg[k] = v end
   return arch.gpt(cfg)
end

-- A LLaMA with 1 layer, n_embd 8, 4 query heads sharing 2 kv heads (head_dim 2).
local function tiny_llama(extra)
   local cfg = { n_layer = 1, n_embd = 8, n_head = 4, n_kv_head = 2, mlp_hidden = 12, vocab = 16 }
   for k, v in pairs(extra or {}) do cfg[k] = v end
   return models.specs("llama", cfg)
end

-- The same LLaMA with a mixture of 2 SwiGLU experts of hidden 6 in each layer.
local function tiny_moe(extra)
   local cfg = { n_expert = 2, expert_hidden = 6 }
   for k, v in pairs(extra or {}) do cfg[k] = v end
   return tiny_llama(cfg)
end

describe("arch.gpt", function()
   it("lists a tied bias-free GPT's parameters in forward order with {out, in} shapes", function()
      assert.same({
         "wte.weight {16,8} embedding",
         "wpe.weight {4,8} embedding",
         "h.0.ln_1.weight {8} norm",
         "h.0.attn.qkv.weight {24,8} matrix",
         "h.0.attn.proj.weight {8,8} matrix",
         "h.0.ln_2.weight {8} norm",
         "h.0.mlp.fc.weight {32,8} matrix",
         "h.0.mlp.proj.weight {8,32} matrix",
         "ln_f.weight {8} norm",
      }, summary(tiny_gpt()))
   end)

   it("puts each bias right after its weight and adds lm_head when untied", function()
      assert.same({
         "wte.weight {16,8} embedding",
         "wpe.weight {4,8} embedding",
         "h.0.ln_1.weight {8} norm",
         "h.0.ln_1.bias {8} bias",
         "h.0.attn.qkv.weight {24,8} matrix",
         "h.0.attn.qkv.bias {24} bias",
         "h.0.attn.proj.weight {8,8} matrix",
         "h.0.attn.proj.bias {8} bias",
         "h.0.ln_2.weight {8} norm",
         "h.0.ln_2.bias {8} bias",
         "h.0.mlp.fc.weight {32,8} matrix",
         "h.0.mlp.fc.bias {32} bias",
         "h.0.mlp.proj.weight {8,32} matrix",
         "h.0.mlp.proj.bias {8} bias",
         "ln_f.weight {8} norm",
         "ln_f.bias {8} bias",
         "lm_head.weight {16,8} output",
      }, summary(tiny_gpt{ tied = false, bias = true }))
   end)

   it("adds lm_head untied without bias and only biases tied with bias", function()
      local untied = summary(tiny_gpt{ tied = false })
      assert.equal(10, #untied)
      assert.equal("lm_head.weight {16,8} output", untied[10])
      local biased = summary(tiny_gpt{ bias = true })
      assert.equal(16, #biased)
      assert.equal("ln_f.bias {8} bias", biased[16])
   end)

   it("marks only the token embedding as shared, and only when tied", function()
      local tied, untied = by_name(tiny_gpt()), by_name(tiny_gpt{ tied = false })
      assert.is_true(tied["wte.weight"].shared_embedding)
      assert.is_false(tied["wpe.weight"].shared_embedding)
      assert.is_false(untied["wte.weight"].shared_embedding)
      for _, s in ipairs(tiny_gpt{ bias = true }) do
         assert.is_false(s.expert)
         assert.is_nil(s.use_muon)
         if s.name ~= "wte.weight" then assert.is_false(s.shared_embedding) end
      end
   end)

   it("gives every spec the configured dtype, f32 by default", function()
      for _, s in ipairs(tiny_gpt()) do assert.equal("f32", s.dtype) end
      for _, s in ipairs(tiny_gpt{ dtype = "bf16" }) do assert.equal("bf16", s.dtype) end
   end)

   it("returns fresh shape tables on every call", function()
      local a, b = tiny_gpt(), tiny_gpt()
      a[1].shape[1] = 99
      assert.equal(16, b[1].shape[1])
   end)

   it("counts 124,373,760 parameters for GPT-2 124M with vocab 50304, tied, no bias", function()
      -- wte 50304*768 + wpe 1024*768 + 12 * (2*768 + 12*768^2) + 768
      local specs = arch.gpt{ n_layer = 12, n_embd = 768, n_head = 12 }
      assert.equal(124373760, arch.numel(specs))
      assert.equal(2 + 12 * 6 + 1, #specs)
   end)

   it("counts the well-known 124,439,808 with vocab 50257 and biases", function()
      local specs = arch.gpt{ n_layer = 12, n_embd = 768, n_head = 12, vocab = 50257,
                              seq_len = 1024, tied = true, bias = true }
      assert.equal(124439808, arch.numel(specs))
   end)
end)

describe("lw.models' llama specs", function()
   it("lists the fused qkv (grouped-query K, V rows) and SwiGLU's fc (gate, up rows)", function()
      assert.same({
         "wte.weight {16,8} embedding",
         "h.0.ln_1.weight {8} norm",
         "h.0.attn.qkv.weight {16,8} matrix",
         "h.0.attn.proj.weight {8,8} matrix",
         "h.0.ln_2.weight {8} norm",
         "h.0.mlp.fc.weight {24,8} matrix",
         "h.0.mlp.proj.weight {8,12} matrix",
         "ln_f.weight {8} norm",
         "lm_head.weight {16,8} output",
      }, summary(tiny_llama()))
      -- Q, K and V as Muon's split_qkv and the layout's cost see them: 8, 4 and 4 rows
      assert.same({ groups = 1, rows = { 8, 4, 4 } },
         by_name(tiny_llama())["h.0.attn.qkv.weight"].qkv)
   end)

   it("defaults n_kv_head to n_head and drops lm_head when tied", function()
      local specs = models.specs("llama", { n_layer = 2, n_embd = 8, n_head = 4, mlp_hidden = 12,
                                            vocab = 16, tied = true })
      local t = by_name(specs)
      assert.same({ 24, 8 }, t["h.1.attn.qkv.weight"].shape)
      assert.same({ 8, 8, 8 }, t["h.1.attn.qkv.weight"].qkv.rows)
      assert.is_nil(t["lm_head.weight"])
      assert.is_true(t["wte.weight"].shared_embedding)
      assert.equal("ln_f.weight", specs[#specs].name)
   end)

   it("leaves the embedding unshared by default (untied)", function()
      assert.is_false(by_name(tiny_llama())["wte.weight"].shared_embedding)
   end)

   it("counts 8,030,261,248 parameters for LLaMA-3 8B", function()
      -- 2 * 128256*4096 + 32 * (2*4096 + 2*4096^2 + 2*1024*4096 + 3*14336*4096) + 4096
      local specs = models.specs("llama", { n_layer = 32, n_embd = 4096, n_head = 32,
                                            n_kv_head = 8, mlp_hidden = 14336, vocab = 128256 })
      assert.equal(8030261248, arch.numel(specs))
      local qkv = by_name(specs)["h.31.attn.qkv.weight"]
      assert.same({ 6144, 4096 }, qkv.shape)
      assert.same({ 4096, 1024, 1024 }, qkv.qkv.rows)
   end)
end)

describe("lw.models' llama with experts (n_expert > 0)", function()
   it("replaces each dense MLP with a router and SwiGLU experts", function()
      assert.same({
         "wte.weight {16,8} embedding",
         "h.0.ln_1.weight {8} norm",
         "h.0.attn.qkv.weight {16,8} matrix",
         "h.0.attn.proj.weight {8,8} matrix",
         "h.0.ln_2.weight {8} norm",
         "h.0.moe.router.weight {2,8} matrix",
         "h.0.moe.experts.0.fc.weight {12,8} expert",
         "h.0.moe.experts.0.proj.weight {8,6} expert",
         "h.0.moe.experts.1.fc.weight {12,8} expert",
         "h.0.moe.experts.1.proj.weight {8,6} expert",
         "ln_f.weight {8} norm",
         "lm_head.weight {16,8} output",
      }, summary(tiny_moe()))
   end)

   it("flags expert weights, and only them, with expert = true", function()
      for _, s in ipairs(tiny_moe{ shared_expert = true }) do
         local is_expert = s.name:find("%.experts%.") ~= nil
         assert.equal(is_expert, s.expert)
         assert.equal(is_expert, s.role == "expert")
      end
   end)

   it("keeps the router off Muon unless router_muon is set", function()
      local off = by_name(tiny_moe())["h.0.moe.router.weight"]
      assert.equal("matrix", off.role)
      assert.is_false(off.use_muon)
      assert.is_false(off.expert)
      local on = by_name(tiny_moe{ router_muon = true })["h.0.moe.router.weight"]
      assert.is_nil(on.use_muon)
      for _, s in ipairs(tiny_moe()) do
         if s.name ~= "h.0.moe.router.weight" then assert.is_nil(s.use_muon) end
      end
   end)

   it("accepts but does not use mlp_hidden", function()
      assert.same(summary(tiny_moe()), summary(tiny_moe{ mlp_hidden = 100 }))
   end)
end)

describe("arch.gpt with experts", function()
   it("replaces each MLP with lw.nn.MoE's router, experts and shared expert", function()
      local specs = tiny_gpt{ n_expert = 2, expert_hidden = 6, shared_expert = true, bias = true }
      local s = summary(specs)
      assert.same({
         "h.0.ln_2.weight {8} norm", "h.0.ln_2.bias {8} bias",
         "h.0.moe.router.weight {2,8} matrix",
         "h.0.moe.experts.0.fc.weight {6,8} expert", "h.0.moe.experts.0.fc.bias {6} bias",
         "h.0.moe.experts.0.proj.weight {8,6} expert", "h.0.moe.experts.0.proj.bias {8} bias",
         "h.0.moe.experts.1.fc.weight {6,8} expert", "h.0.moe.experts.1.fc.bias {6} bias",
         "h.0.moe.experts.1.proj.weight {8,6} expert", "h.0.moe.experts.1.proj.bias {8} bias",
         "h.0.moe.shared.fc.weight {6,8} matrix", "h.0.moe.shared.fc.bias {6} bias",
         "h.0.moe.shared.proj.weight {8,6} matrix", "h.0.moe.shared.proj.bias {8} bias",
      }, { unpack(s, 9, 23) })
      local named = by_name(specs)
      assert.is_true(named["h.0.moe.experts.1.proj.bias"].expert)
      assert.is_false(named["h.0.moe.shared.fc.weight"].expert)
      assert.is_false(named["h.0.moe.router.weight"].expert)
      assert.is_false(named["h.0.moe.router.weight"].use_muon)
      assert.is_nil(by_name(tiny_gpt{ n_expert = 2, router_muon = true })
         ["h.0.moe.router.weight"].use_muon)
      -- expert_hidden defaults to 4 n_embd; n_expert 0 is the dense model
      assert.same({ 32, 8 }, by_name(tiny_gpt{ n_expert = 2 })["h.0.moe.experts.0.fc.weight"].shape)
      assert.same(summary(tiny_gpt()), summary(tiny_gpt{ n_expert = 0, topk = 1 }))
   end)

   it("refuses a topk beyond n_expert, and counts that are not counts", function()
      assert.has_error(function() tiny_gpt{ n_expert = 2, topk = 3 } end,
                       "lw.arch.gpt: topk (3) must be <= n_expert (2)")
      assert.has_error(function() tiny_gpt{ n_expert = -1 } end,
                       "lw.arch.gpt: n_expert (-1) must be an integer >= 0")
      assert.has_error(function() tiny_gpt{ n_expert = 2, topk = 0 } end,
                       "lw.arch.gpt: topk (0) must be a positive integer")
      assert.has_error(function() tiny_gpt{ n_expert = 2, aux_coef = -0.5 } end,
                       "lw.arch.gpt: aux_coef (-0.5) must be a finite number >= 0")
   end)
end)

describe("arch validation", function()
   local gpt = { n_layer = 1, n_embd = 8, n_head = 2 }
   local llama = { n_layer = 1, n_embd = 8, n_head = 4, n_kv_head = 2, mlp_hidden = 12 }
   local moe = { n_layer = 1, n_embd = 8, n_head = 4, n_kv_head = 2, n_expert = 2,
                 expert_hidden = 6 }
   local function llama_specs(cfg) return models.specs("llama", cfg) end

   local function with(base, changes)
      local t = {}
      for k, v in pairs(base) do t[k] = v end
      for k, v in pairs(changes) do t[k] = v end
      return t
   end
   local function without(base, key)
      local t = with(base, {})
      t[key] = nil
      return t
   end

   it("rejects a config that is not a table", function()
      assert.has_error(function() arch.gpt(nil) end, "lw.arch.gpt: config must be a table, got nil")
      assert.has_error(function() llama_specs(12) end,
                       "lw.models.llama: config must be a table, got number")
   end)

   it("rejects a missing required field", function()
      assert.has_error(function() arch.gpt(without(gpt, "n_layer")) end,
                       "lw.arch.gpt: missing required field 'n_layer'")
      assert.has_error(function() arch.gpt(without(gpt, "n_head")) end,
                       "lw.arch.gpt: missing required field 'n_head'")
      assert.has_error(function() llama_specs(without(llama, "n_embd")) end,
                       "lw.models.llama: missing required field 'n_embd'")
   end)

   it("rejects sizes that are zero, negative, fractional or not numbers", function()
      assert.has_error(function() arch.gpt(with(gpt, { n_layer = 0 })) end,
                       "lw.arch.gpt: n_layer (0) must be a positive integer")
      assert.has_error(function() arch.gpt(with(gpt, { vocab = -5 })) end,
                       "lw.arch.gpt: vocab (-5) must be a positive integer")
      assert.has_error(function() arch.gpt(with(gpt, { seq_len = 2.5 })) end,
                       "lw.arch.gpt: seq_len (2.5) must be a positive integer")
      assert.has_error(function() arch.gpt(with(gpt, { n_embd = "8" })) end,
                       'lw.arch.gpt: n_embd ("8") must be a positive integer')
      assert.has_error(function() arch.gpt(with(gpt, { n_layer = math.huge })) end,
                       "lw.arch.gpt: n_layer (inf) must be a positive integer")
      assert.has_error(function() llama_specs(with(llama, { mlp_hidden = 0 })) end,
                       "lw.models.llama: mlp_hidden (0) must be a positive integer")
      assert.has_error(function() llama_specs(with(moe, { expert_hidden = 1.5 })) end,
                       "lw.models.llama: expert_hidden (1.5) must be a positive integer")
      assert.has_error(function() llama_specs(with(moe, { n_expert = -2 })) end,
                       "lw.models.llama: n_expert (-2) must be an integer >= 0")
   end)

   it("rejects n_embd not divisible by n_head", function()
      assert.has_error(function() arch.gpt{ n_layer = 1, n_embd = 100, n_head = 3 } end,
                       "lw.arch.gpt: n_embd (100) must be divisible by n_head (3)")
      assert.has_error(function() llama_specs(with(llama, { n_head = 3, n_kv_head = 3 })) end,
                       "lw.models.llama: n_embd (8) must be divisible by n_head (3)")
   end)

   it("rejects an n_kv_head that does not divide n_head, larger ones included", function()
      assert.has_error(function() llama_specs(with(llama, { n_kv_head = 8 })) end,
                       "lw.models.llama: n_kv_head (8) must divide n_head (4)")
      assert.has_error(function() llama_specs(with(moe, { n_kv_head = 8 })) end,
                       "lw.models.llama: n_kv_head (8) must divide n_head (4)")
      assert.has_error(function() llama_specs(with(llama, { n_head = 8, n_kv_head = 3 })) end,
                       "lw.models.llama: n_kv_head (3) must divide n_head (8)")
   end)

   it("rejects unknown fields so that typos are caught", function()
      assert.has_error(function() arch.gpt(with(without(gpt, "n_layer"), { n_layers = 1 })) end,
                       "lw.arch.gpt: unknown field 'n_layers'")
      assert.has_error(function() arch.gpt(with(gpt, { ffn_hidden = 2 })) end,
                       "lw.arch.gpt: unknown field 'ffn_hidden'")
      -- the hand-written LLaMA specs' names, which no module declares
      assert.has_error(function() llama_specs(with(llama, { ffn_hidden = 12 })) end,
                       "lw.models.llama: unknown field 'ffn_hidden'")
      assert.has_error(function() llama_specs(with(llama, { fused = true })) end,
                       "lw.models.llama: unknown field 'fused'")
      assert.has_error(function() llama_specs(with(moe, { n_experts = 2 })) end,
                       "lw.models.llama: unknown field 'n_experts'")
   end)

   it("rejects an unknown dtype", function()
      assert.has_error(function() arch.gpt(with(gpt, { dtype = "fp32" })) end,
                       'lw.arch.gpt: dtype ("fp32") must be one of "f32", "bf16", "f16"')
      assert.has_error(function() llama_specs(with(llama, { dtype = 16 })) end,
                       'lw.models.llama: dtype (16) must be one of "f32", "bf16", "f16"')
   end)

   it("accepts f16 and bf16 as dtypes", function()
      assert.equal("f16", llama_specs(with(llama, { dtype = "f16" }))[1].dtype)
      assert.equal("bf16", llama_specs(with(moe, { dtype = "bf16" }))[1].dtype)
   end)

   it("rejects booleans given as other types", function()
      assert.has_error(function() arch.gpt(with(gpt, { tied = 1 })) end,
                       "lw.arch.gpt: tied (1) must be a boolean")
      assert.has_error(function() arch.gpt(with(gpt, { bias = "false" })) end,
                       'lw.arch.gpt: bias ("false") must be a boolean')
      assert.has_error(function() llama_specs(with(llama, { tied = 0 })) end,
                       "lw.models.llama: tied (0) must be a boolean")
      assert.has_error(function() llama_specs(with(moe, { router_muon = "yes" })) end,
                       'lw.models.llama: router_muon ("yes") must be a boolean')
   end)

   it("points the error at the caller's line", function()
      local ok, msg = pcall(function() arch.gpt(with(gpt, { n_layer = 0 })) end)
      assert.is_false(ok)
      assert.matches("^[^:]*arch_spec%.lua:%d+: lw%.arch%.gpt: n_layer %(0%)", msg)
   end)
end)
