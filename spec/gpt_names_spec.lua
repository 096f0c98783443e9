-- gpt_names_spec.lua: the name lists of lua/lwopt/gpt_names.lua: which tensors each format
-- holds for a model, in which layout, what it cannot hold, and telling the formats apart.
local names = require("lwopt.gpt_names")

local CFG = { n_layer = 2, n_embd = 8, vocab = 20, rows = 32, seq_len = 4, tied = true,
   bias = false, mlp_hidden = 32 }

local function by_name(list)
   local out = {}
   for _, e in ipairs(list) do out[e.name] = e end
   return out
end

describe("lw gpt_names", function()
   it("lays out hf-gpt2 as transformers reads it: Conv1D [in, out], zero biases, real rows",
      function()
      local list = assert(names.map("hf-gpt2", CFG))
      assert.equal(2 + 2 * 12 + 2, #list)
      local e = by_name(list)
      assert.same({ 20, 8 }, e["transformer.wte.weight"].shape)
      assert.equal(20, e["transformer.wte.weight"].rows)
      assert.same({ 8, 24 }, e["transformer.h.1.attn.c_attn.weight"].shape)
      assert.equal("h.1.attn.qkv.weight", e["transformer.h.1.attn.c_attn.weight"].from)
      assert.is_true(e["transformer.h.1.attn.c_attn.weight"].transpose)
      assert.same({ 32, 8 }, e["transformer.h.0.mlp.c_proj.weight"].shape)
      assert.is_nil(e["transformer.h.0.mlp.c_fc.bias"].from) -- zeros: lwopt has no biases
      assert.is_nil(e["lm_head.weight"]) -- tied: transformers ties it on load
      local untied = by_name(names.map("hf-gpt2", { n_layer = 1, n_embd = 8, vocab = 20,
         rows = 32, seq_len = 4, tied = false, bias = true, mlp_hidden = 32 }))
      assert.same({ 20, 8 }, untied["lm_head.weight"].shape)
      assert.equal("h.0.ln_1.bias", untied["transformer.h.0.ln_1.bias"].from)
   end)

   it("lays out nanogpt as its state dict: nn.Linear [out, in], padded rows, lm_head tied",
      function()
      local e = by_name(assert(names.map("nanogpt", CFG)))
      assert.same({ 24, 8 }, e["transformer.h.0.attn.c_attn.weight"].shape)
      assert.is_falsy(e["transformer.h.0.attn.c_attn.weight"].transpose)
      assert.same({ 32, 8 }, e["transformer.wte.weight"].shape)
      assert.is_nil(e["transformer.h.0.ln_1.bias"])
      assert.is_true(e["lm_head.weight"].alias)
      assert.equal("wte.weight", e["lm_head.weight"].from)
   end)

   it("says what a format cannot hold", function()
      local wide = { n_layer = 1, n_embd = 8, vocab = 20, rows = 32, seq_len = 4, tied = true,
         mlp_hidden = 40 }
      assert.same({ nil, "nanoGPT's MLP has 4 x n_embd = 32 hidden channels, this model 40" },
         { names.map("nanogpt", wide) })
      assert.same({ nil, "unknown format 'onnx' (hf-gpt2, nanogpt)" }, { names.map("onnx", CFG) })
   end)

   it("tells lwopt's, hf-gpt2's and nanogpt's files apart by their names and shapes", function()
      local function has(list)
         local e = by_name(list)
         return function(name) return e[name] and e[name].shape end
      end
      assert.equal("hf-gpt2", names.detect(has(names.map("hf-gpt2", CFG))))
      assert.equal("nanogpt", names.detect(has(names.map("nanogpt", CFG))))
      assert.equal("lwopt", names.detect(has({ { name = "wte.weight", shape = { 32, 8 } } })))
   end)
end)
