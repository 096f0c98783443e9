-- presets_llama_spec.lua: --arch llama's presets (presets.lua's n_kv_head): tiny, small and
-- gpt2 resolve through the recipe's flags to LLaMA shapes with grouped KV heads whose blocks
-- hold about GPT-2's blocks' parameters, each declares its model, and tiny trains.
local lw = require("lwopt")
local recipe_flags = require("lwopt.app.recipe_flags")
local presets = require("lwopt.presets")
local helpers = require("helpers")

-- The recipe's flags for argv, checked (the preset's values filled in).
local function flags_of(argv)
   local v = recipe_flags.parse(argv, "recipes/gpt_small.lua")
   recipe_flags.check(v)
   return v
end

-- Parameters of the blocks (h.N.*) among specs.
local function block_numel(specs)
   local n = 0
   for _, s in ipairs(specs) do
      if s.name:match("^h%.") then n = n + lw.arch.numel({ s }) end
   end
   return n
end

describe("--arch llama's presets", function()
   it("give tiny, small and gpt2 grouped KV heads and about GPT-2's block parameters",
      function()
      -- preset: KV heads, and LLaMA's MLP width (8/3 of the width, rounded up to 64)
      local want = { tiny = { 2, 192 }, small = { 4, 704 }, gpt2 = { 4, 2048 } }
      for name, w in pairs(want) do
         local v = flags_of({ "--arch", "llama", "--preset", name })
         local p = presets.presets[name]
         assert.same({ p.n_layer, p.n_embd, p.n_head, w[1] },
            { v.n_layer, v.n_embd, v.n_head, v.n_kv_head }, name)
         local cfg = presets.gpt_config(name, 50257)
         cfg.tied, cfg.n_kv_head = nil, v.n_kv_head
         local llama = lw.models.specs("llama", cfg)
         local gpt = lw.models.specs("gpt", presets.gpt_config(name, 50257))
         local by = {}
         for _, s in ipairs(llama) do by[s.name] = s.shape end
         assert.same({ 2 * w[2], p.n_embd }, by["h.0.mlp.fc.weight"], name)
         local hd = p.n_embd / p.n_head
         assert.same({ (p.n_head + 2 * w[1]) * hd, p.n_embd }, by["h.0.attn.qkv.weight"], name)
         assert.same({ 50304, p.n_embd }, by["lm_head.weight"], name) -- untied
         -- per block 89% (gpt2) to 100% (tiny) of GPT-2's
         local ratio = block_numel(llama) / block_numel(gpt)
         assert.is_true(ratio > 0.88 and ratio <= 1, name .. ": " .. ratio)
      end
      -- a preset's heads changed: a KV head per head unless --n-kv-head says
      assert.is_nil(flags_of({ "--arch", "llama", "--preset", "tiny", "--n-head", "8" }).n_kv_head)
      assert.equal(1, flags_of({ "--arch", "llama", "--preset", "tiny", "--n-kv-head", "1" })
         .n_kv_head)
      -- GPT-2's model keeps a KV head per head
      assert.is_nil(flags_of({ "--preset", "tiny" }).n_kv_head)
   end)

   it("trains tiny a few steps", function()
      local out, status = helpers.sh("cd /tmp && luajit " .. assert(io.popen("pwd")):read("*l")
         .. "/recipes/gpt_small.lua --arch llama --preset tiny --steps 3 --warmup 1 --sample 0 "
         .. "--eval-max 2 --progress lines")
      assert.equal(0, status, out)
      assert.matches("LLaMA 4 layers x 64, 4 heads (2 KV)", out, 1, true)
      local first, last = out:match("step +1/3  loss (%d+%.%d+)"), out:match("step +3/3  loss "
         .. "(%d+%.%d+)")
      assert.is_not_nil(first, out)
      assert.is_true(tonumber(last) < tonumber(first), out)
   end)
end)
