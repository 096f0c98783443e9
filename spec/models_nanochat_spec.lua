-- models_nanochat_spec.lua: the registry's nanochat model (nn.GPT with nanochat's parts: value
-- embeddings gated into V, per-layer residual scalars, rotary turning nanochat's way, QK norm,
-- ReLU^2, parameter-free norms) against the float64 model written from nanochat's published
-- architecture (llama_reference.lua, through model_check.lua): the loss within 1e-5 and every
-- parameter's gradient against central differences; its parameters, routing and refusals.
local lw = require("lwopt")
local model_check = require("model_check")

describe("lw.models' nanochat against a float64 nanochat", function()
   local base = { n_layer = 3, n_embd = 16, n_head = 4, n_kv_head = 2, vocab = 13, seq_len = 6,
      rope_base = 50, mlp_hidden = 24 }

   it("matches its loss and gradients (softcap, embed norm and windows off)", function()
      local cfg = {}
      for k, v in pairs(base) do cfg[k] = v end
      cfg.softcap, cfg.embed_norm = 0, false
      model_check.check("nanochat", cfg)
   end)

   it("matches its loss and gradients with nanochat's residual scalars and a small gate scale",
      function()
      -- the scalars as nanochat starts them (the bound values are random), and a gate scale
      -- other than 3, 8 gate channels
      local cfg = { ve_gate_channels = 8, ve_gate_scale = 1.5 }
      for k, v in pairs(base) do cfg[k] = v end
      model_check.check("nanochat", cfg, function(d)
         local r, x = d:param("resid_lambdas"), d:param("x0_lambdas")
         for i = 0, 2 do
            r.data[i] = 1.15 - 0.10 * i / 2
            x.data[i] = 0.20 - 0.15 * i / 2
         end
      end)
   end)

   it("matches its loss and gradients with ReLU^2 experts in place of the MLPs", function()
      -- aux_coef 0: the reference's first result is then the whole objective
      local cfg = { n_expert = 2, topk = 1, expert_hidden = 8, aux_coef = 0 }
      for k, v in pairs(base) do cfg[k] = v end
      model_check.check("nanochat", cfg)
   end)

   -- the logits capped at 2 (so that the cap bends them), a norm after the embedding, and the
   -- window pattern "SL" (S: the window, L: the whole sequence; the last layer always L)
   it("matches its loss and gradients with the softcap, embed norm and windows on", function()
      local cfg = { softcap = 2, embed_norm = true, window_pattern = "SL", window = 2 }
      for k, v in pairs(base) do cfg[k] = v end
      model_check.check("nanochat", cfg, nil, { windows = { 2, 0, 0 } })
   end)

   it("declares nanochat's parameters: value embeddings on every other layer, the last included",
      function()
      local specs = lw.models.specs("nanochat", { n_layer = 2, n_embd = 64, n_head = 4,
         n_kv_head = 2, vocab = 100 })
      local got = {}
      for i, s in ipairs(specs) do got[i] = s.name .. " " .. table.concat(s.shape, "x") .. " "
         .. s.role end
      assert.same({ "wte.weight 100x64 embedding", "resid_lambdas 2 scalar",
         "x0_lambdas 2 scalar", "h.0.attn.qkv.weight 128x64 matrix",
         "h.0.attn.proj.weight 64x64 matrix", "h.0.mlp.fc.weight 256x64 matrix",
         "h.0.mlp.proj.weight 64x256 matrix", "h.1.attn.qkv.weight 128x64 matrix",
         "h.1.attn.ve.weight 100x32 embedding", "h.1.attn.ve_gate.weight 2x12 matrix",
         "h.1.attn.proj.weight 64x64 matrix", "h.1.mlp.fc.weight 256x64 matrix",
         "h.1.mlp.proj.weight 64x256 matrix", "lm_head.weight 100x64 output" }, got)
      assert.equal("nanochat 2 layers x 64, 4 heads (2 KV), sequence 2048",
         lw.models.describe("nanochat", { n_layer = 2, n_embd = 64, n_head = 4, n_kv_head = 2 }))
      local c = lw.models.config("nanochat", { n_layer = 2, n_embd = 64, n_head = 4 })
      assert.same({ 100000, true, 12, 3, 32768 }, { c.rope_base, c.rope_reverse,
         c.ve_gate_channels, c.ve_gate_scale, c.vocab })
   end)

   it("routes the residual scalars and value embeddings to AdamW, the gates to Muon", function()
      local specs = lw.route(lw.models.specs("nanochat", { n_layer = 1, n_embd = 32, n_head = 2,
         vocab = 50 }), nil, { warn = false })
      local by = {}
      for _, s in ipairs(specs) do by[s.name] = s.optimizer end
      assert.equal("adamw", by.resid_lambdas)
      assert.equal("adamw", by.x0_lambdas)
      assert.equal("adamw", by["h.0.attn.ve.weight"])
      assert.equal("muon", by["h.0.attn.ve_gate.weight"])
   end)

   it("declares a TP rank's shards of the value embeddings and gates: its KV heads' columns and "
      .. "rows", function()
      local cfg = { n_layer = 2, n_embd = 64, n_head = 4, n_kv_head = 2, vocab = 100, tp = 2,
         tp_rank = 1 }
      local by = {}
      for _, s in ipairs(lw.models.specs("nanochat", cfg)) do by[s.name] = s end
      local ve, gate = by["h.1.attn.ve.weight"], by["h.1.attn.ve_gate.weight"]
      assert.same({ 100, 16 }, ve.shape)
      assert.same({ 100, 32 }, ve.full_shape)
      assert.same({ 1, 1 }, { ve.tp.dim, ve.tp.blocks })
      assert.same({ 1, 12 }, gate.shape)
      assert.same({ 2, 12 }, gate.full_shape)
      assert.same({ 0, 1 }, { gate.tp.dim, gate.tp.blocks })
      assert.is_nil(by["h.0.attn.ve.weight"])
      -- the shards put together are the tp 1 tensors: rank r's columns r * 16 .. r * 16 + 15
      local runs = {}
      lw.tp.runs(ve.full_shape, ve.tp, 2, 1, function(l, f, n) runs[#runs + 1] = { l, f, n } end)
      assert.same({ 0, 16, 16 }, runs[1])
      assert.same({ 16, 48, 16 }, runs[2])
   end)

   it("refuses what it cannot run, by name", function()
      local ok, err = pcall(lw.models.specs, "nanochat", { n_layer = 2, n_embd = 64, n_head = 4,
         n_kv_head = 2, vocab = 100, tp = 4 })
      assert.is_false(ok)
      assert.matches("tp 4 does not divide the 2 KV heads", tostring(err), 1, true)
      assert.has_error(function()
         lw.models.config("nanochat", { n_layer = 2, n_embd = 8, n_head = 2 })
      end, "lw.models.nanochat: ve_gate_channels (12) must be <= n_embd (8): the gate reads the "
         .. "attention input's first channels")
   end)
end)
