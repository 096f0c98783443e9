-- models_llama_spec.lua: the registry's llama model (nn.GPT with LLaMA's parts) against the
-- slow float64 LLaMA of llama_reference.lua; also the parts nanochat adds on the same model: QK
-- norm, a sliding window, ReLU^2 and parameter-free norms. Loss within 1e-5 from the same
-- weights, gradients against the reference's finite differences.
local ffi = require("ffi")
local lw = require("lwopt")
local bind = require("nn_helpers").bind
local ref_llama = require("llama_reference")

describe("lw.models' llama against a float64 LLaMA", function()
   local base = { n_layer = 2, n_embd = 16, n_head = 4, n_kv_head = 2, vocab = 13, seq_len = 6,
      rope_base = 50 }
   local nanochat = { n_layer = 1, n_embd = 16, n_head = 4, n_kv_head = 2, vocab = 13,
      seq_len = 6, rope_base = 50, qk_norm = true, window = 2, activation = "relu2",
      norm_gain = false, mlp_hidden = 24 }
   for name, cfg in pairs({ llama = base, ["nanochat's parts"] = nanochat }) do
      it(("matches its loss and gradients (%s)"):format(name), function()
         local model = lw.models.build("llama", cfg)
         local full = lw.models.config("llama", cfg)
         local d = bind(model)
         local b, t = 2, 6
         local tokens, targets = ffi.new("int32_t[12]"), ffi.new("int32_t[12]")
         for i = 0, 11 do tokens[i] = (i * 7 + 3) % 13; targets[i] = (i * 5 + 1) % 13 end
         local function params()
            local P = {}
            for _, s in ipairs(model:parameters()) do P[s.name] = d:param(s.name):totable() end
            return P
         end
         local loss = model:forward(tokens, targets, b, t)
         assert.near(ref_llama(params(), full, tokens, targets, b, t), loss, 1e-5)
         d:zero_grad()
         model:backward(1)
         for _, s in ipairs(model:parameters()) do
            local p, g = d:param(s.name), d:grad(s.name)
            local worst, step = 0, math.max(1, math.floor(p.numel / 5))
            for i = 0, p.numel - 1, step do
               local keep = p.data[i]
               p.data[i] = keep + 1e-3
               local up = ref_llama(params(), full, tokens, targets, b, t)
               p.data[i] = keep - 1e-3
               local down = ref_llama(params(), full, tokens, targets, b, t)
               p.data[i] = keep
               local num = (up - down) / 2e-3
               worst = math.max(worst, math.abs(num - g.data[i]) / math.max(1e-2, math.abs(num)))
            end
            assert.is_true(worst < 2e-2, s.name .. " worst " .. worst)
         end
      end)
   end

   it("declares LLaMA's parameters: no positions, RMSNorm gains, GQA's qkv, SwiGLU's fc", function()
      local specs = lw.models.specs("llama", { n_layer = 1, n_embd = 64, n_head = 4,
         n_kv_head = 2, vocab = 100 })
      local got = {}
      for i, s in ipairs(specs) do got[i] = s.name .. " " .. table.concat(s.shape, "x") end
      assert.same({ "wte.weight 100x64", "h.0.ln_1.weight 64", "h.0.attn.qkv.weight 128x64",
         "h.0.attn.proj.weight 64x64", "h.0.ln_2.weight 64", "h.0.mlp.fc.weight 384x64",
         "h.0.mlp.proj.weight 64x192", "ln_f.weight 64", "lm_head.weight 100x64" }, got)
      assert.equal("LLaMA 1 layers x 64, 4 heads (2 KV), sequence 1024",
         lw.models.describe("llama", { n_layer = 1, n_embd = 64, n_head = 4, n_kv_head = 2 }))
      assert.has_error(function()
         lw.models.config("llama", { n_layer = 1, n_embd = 64, n_head = 4, n_kv_head = 3 })
      end, "lw.models.llama: n_kv_head (3) must divide n_head (4)")
   end)
end)
