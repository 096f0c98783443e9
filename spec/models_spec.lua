-- models_spec.lua: the model registry (lw.models): its names, configs checked with defaults,
-- parameter specs from the modules' declarations (any size, any TP rank, nothing allocated)
-- and models built from it.
local lw = require("lwopt")

local tiny = { n_layer = 2, n_embd = 16, n_head = 2, vocab = 40, seq_len = 8 }

local function with(extra)
   local c = {}
   for k, v in pairs(tiny) do c[k] = v end
   for k, v in pairs(extra or {}) do c[k] = v end
   return c
end

describe("lw.models", function()
   it("names its models and refuses an unknown one, listing them", function()
      assert.same({ "gpt", "llama", "nanochat" }, lw.models.names())
      assert.has_error(function() lw.models.get("gpt3") end,
         "lw.models: unknown model 'gpt3' (gpt, llama, nanochat; other models are registered by "
         .. "a models file: --models FILE)")
   end)

   it("fills a config's defaults and names what is wrong", function()
      local c = lw.models.config("gpt", { n_layer = 1, n_embd = 8, n_head = 2 })
      assert.same({ 50304, 1024, true, false, 32, 0, "fp32" },
         { c.vocab, c.seq_len, c.tied, c.bias, c.mlp_hidden, c.n_expert, c.activations })
      assert.has_error(function() lw.models.config("gpt", with({ n_head = 3 })) end,
         "lw.models.gpt: n_embd (16) must be divisible by n_head (3)")
      assert.has_error(function() lw.models.config("gpt", with({ heads = 2 })) end,
         "lw.models.gpt: unknown field 'heads'")
      assert.has_error(function() lw.models.config("gpt", with({ activations = "fp16" })) end,
         "lw.models.gpt: activations must be 'fp32' or 'bf16', got 'fp16'")
      assert.has_error(function() lw.models.config("gpt", with({ n_expert = 2, topk = 3 })) end,
         "lw.models.gpt: topk (3) must be <= n_expert (2)")
   end)

   it("declares a model's parameters from its modules, at every TP rank", function()
      local built = lw.models.build("gpt", tiny):parameters()
      local specs = lw.models.specs("gpt", tiny)
      assert.same(built, specs)
      assert.equal("wte.weight", specs[1].name)
      assert.equal("f32", specs[1].dtype)
      for r = 0, 1 do
         local shard = lw.models.specs("gpt", with({ tp = 2, tp_rank = r, bias = true }))
         local model = lw.nn.GPT.new(with({ tp = { size = 2, rank = r }, bias = true }))
         assert.same(model:parameters(), shard)
         local qkv
         for _, x in ipairs(shard) do if x.name == "h.0.attn.qkv.weight" then qkv = x end end
         assert.same({ 24, 16 }, qkv.shape) -- this rank's head's Q, K and V rows
      end
      for _, s in ipairs(lw.models.specs("gpt", with({ dtype = "bf16" }))) do
         assert.equal("bf16", s.dtype)
      end
      assert.has_error(function() lw.models.specs("gpt", with({ tp = 2, tp_rank = 2 })) end,
         "lw.models.gpt: tp_rank (2) must be below tp (2)")
      assert.has_error(function() lw.models.specs("gpt", with({ tp = 4, n_head = 2 })) end)
   end)

   it("declares GPT-2 1.5B's tensors without allocating them, its published count", function()
      local specs = lw.models.specs("gpt", { n_layer = 48, n_embd = 1600, n_head = 25,
         vocab = 50257, bias = true })
      assert.equal(2 + 48 * 12 + 2, #specs)
      assert.equal(1557611200, lw.arch.numel(specs))
   end)

   it("says a model in words", function()
      assert.equal("GPT 2 layers x 16, 2 heads, sequence 8", lw.models.describe("gpt", tiny))
      assert.equal("GPT 2 layers x 16, 2 heads, sequence 8, 4 experts, top-2",
         lw.models.describe("gpt", with({ n_expert = 4 })))
   end)
end)
