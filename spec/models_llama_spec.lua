-- models_llama_spec.lua: the registry's llama model (nn.GPT with LLaMA's parts) against the
-- slow float64 LLaMA of llama_reference.lua; also the parts nanochat adds on the same model: QK
-- norm, a sliding window (on every layer, or per layer from a pattern), ReLU^2, parameter-free
-- norms, the norm after the token embedding and the logits' softcap. Loss within 1e-5 from the
-- same weights, gradients against the reference's finite differences (model_check.lua),
-- sampling's distribution against the reference's logits; the capped head over 2 TP ranks
-- against one rank.
local lw = require("lwopt")
local model_check = require("model_check")

describe("lw.models' llama against a float64 LLaMA", function()
   local base = { n_layer = 2, n_embd = 16, n_head = 4, n_kv_head = 2, vocab = 13, seq_len = 6,
      rope_base = 50 }
   local nanochat = { n_layer = 1, n_embd = 16, n_head = 4, n_kv_head = 2, vocab = 13,
      seq_len = 6, rope_base = 50, qk_norm = true, window = 2, activation = "relu2",
      norm_gain = false, mlp_hidden = 24 }
   -- nanochat's head: a window on the first layer only, the parameter-free norm of the
   -- embedding, logits capped at 1 (they reach ~3 here, so the cap bends them); and with
   -- LLaMA's gains, the embedding norm's own gain
   local head = { n_layer = 2, n_embd = 16, n_head = 4, n_kv_head = 2, vocab = 13, seq_len = 6,
      rope_base = 50, qk_norm = true, window = 2, window_pattern = "SL", activation = "relu2",
      norm_gain = false, mlp_hidden = 24, embed_norm = true, softcap = 1 }
   local gains = { n_layer = 2, n_embd = 16, n_head = 4, n_kv_head = 2, vocab = 13, seq_len = 6,
      rope_base = 50, window = 3, window_pattern = "S", embed_norm = true, softcap = 1.5 }
   for name, cfg in pairs({ llama = base, ["nanochat's parts"] = nanochat,
      ["nanochat's head"] = head, ["an embedding norm with a gain"] = gains }) do
      it(("matches its loss and gradients (%s)"):format(name), function()
         -- sampling's distribution: the softmax of the reference's (capped) logits
         model_check.check("llama", cfg, nil, nil, function(model, logits)
            for _, row in ipairs({ 0, 7 }) do
               local p, mx, z = model:next_probs(row), -math.huge, 0
               for v = 1, cfg.vocab do mx = math.max(mx, logits[row + 1][v]) end
               for v = 1, cfg.vocab do z = z + math.exp(logits[row + 1][v] - mx) end
               for v = 1, cfg.vocab do
                  assert.near(math.exp(logits[row + 1][v] - mx) / z, p[v - 1], 1e-6)
               end
            end
         end)
      end)
   end

   it("gives each layer the window its pattern says, the last layer full", function()
      local GPT = lw.nn.GPT
      local c = { n_layer = 6, window = 4, window_pattern = "SSSL" }
      local got = {}
      for i = 0, 5 do got[i + 1] = GPT.layer_window(c, i) end
      assert.same({ 4, 4, 4, 0, 4, 0 }, got)
      c.window_pattern = nil -- no pattern: the window on every layer, as before
      for i = 0, 5 do got[i + 1] = GPT.layer_window(c, i) end
      assert.same({ 4, 4, 4, 4, 4, 4 }, got)
      c.window_pattern = "L"
      for i = 0, 5 do got[i + 1] = GPT.layer_window(c, i) end
      assert.same({ 0, 0, 0, 0, 0, 0 }, got)
      assert.has_error(function()
         lw.models.config("llama", { n_layer = 4, n_embd = 64, n_head = 4, window_pattern = "SSSL" })
      end, "lw.models.llama: window_pattern 'SSSL' has short-window layers (S) but window is 0: "
         .. "give window > 0")
      assert.has_error(function()
         lw.models.config("llama", { n_layer = 4, n_embd = 64, n_head = 4, window = 8,
            window_pattern = "SSXL" })
      end, 'lw.models.llama: window_pattern ("SSXL") must be a string of the characters S, L')
      assert.has_error(function()
         lw.models.config("llama", { n_layer = 4, n_embd = 64, n_head = 4, softcap = -1 })
      end, "lw.models.llama: softcap (-1) must be a finite number >= 0")
   end)

   it("declares the embedding norm's gain after the embedding, none without a gain", function()
      local names = function(cfg)
         local out = {}
         for i, s in ipairs(lw.models.specs("llama", cfg)) do out[i] = s.name end
         return table.concat(out, " ", 1, 3)
      end
      assert.equal("wte.weight ln_e.weight h.0.ln_1.weight",
         names({ n_layer = 1, n_embd = 64, n_head = 4, vocab = 100, embed_norm = true }))
      assert.equal("wte.weight h.0.attn.qkv.weight h.0.attn.proj.weight",
         names({ n_layer = 1, n_embd = 64, n_head = 4, vocab = 100, embed_norm = true,
            norm_gain = false }))
   end)

   it("splits the capped head, the embedding norm and a window pattern over 2 TP ranks #mpi",
      function()
      -- spec/fixtures/gpt_head_tp.lua: the vocabulary-parallel head caps each rank's logits
      -- before their statistics are combined; the loss and the gradients are the one-rank
      -- model's within float rounding of the sums' other order
      local out, status = require("helpers").sh("OMPI_ALLOW_RUN_AS_ROOT=1 "
         .. "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 60 mpirun -np 2 -x OPENBLAS_NUM_THREADS=1 "
         .. "bin/lwopt run spec/fixtures/gpt_head_tp.lua")
      assert.equal(0, status, out)
      local lines = 0
      for one, two, g in out:gmatch("rank %d: loss ([%d.]+) tp ([%d.]+) grads ([%d.e+-]+)") do
         lines = lines + 1
         assert.is_true(math.abs(tonumber(one) - tonumber(two)) < 1e-6, out)
         assert.is_true(tonumber(g) < 1e-5, out)
      end
      assert.equal(2, lines, out)
   end)

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
