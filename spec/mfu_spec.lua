-- mfu_spec.lua: model FLOPs utilisation (lwopt/mfu.lua): the peaks by device name, a token's
-- FLOPs against the formula written out here for GPT-2's shapes, and the recipe's mfu in its
-- progress line and log with --peak-tflops on the CPU.
local lw = require("lwopt")
local mfu = require("lwopt.mfu")
local helpers = require("helpers")

describe("lwopt.mfu", function()
   it("knows the dense bf16 peaks of the datasheets, and no other", function()
      assert.equal(989.4e12, mfu.peak("NVIDIA H100 80GB HBM3"))
      assert.equal(756e12, mfu.peak("NVIDIA H100 PCIe"))
      assert.equal(989.4e12, mfu.peak("NVIDIA H200"))
      assert.equal(312e12, mfu.peak("NVIDIA A100-SXM4-80GB"))
      assert.is_nil(mfu.peak("cpu"))
      assert.is_nil(mfu.peak("NVIDIA GeForce RTX 3090"))
   end)

   it("counts 6 FLOPs per parameter a token meets and the attention's 12 L C T", function()
      local L, C, V, T = 12, 768, 50304, 1024
      -- tied: the token table is the LM head; positions are a lookup
      local n = V * C + L * (12 * C * C + 2 * C) + C
      local specs = lw.models.specs("gpt", { n_layer = L, n_embd = C, n_head = 12 })
      local m = { n_layer = L, n_embd = C, t = T, topk = 1, n_expert = 1 }
      assert.equal(6 * n + 12 * L * C * T, mfu.flops_per_token(specs, m))
      -- untied: the token table is a lookup, the head multiplies
      specs = lw.models.specs("gpt", { n_layer = L, n_embd = C, n_head = 12, tied = false })
      assert.equal(6 * n + 12 * L * C * T, mfu.flops_per_token(specs, m))
      -- experts: a token meets topk of them
      specs = lw.models.specs("gpt", { n_layer = 2, n_embd = 64, n_head = 2, vocab = 128,
         n_expert = 4, topk = 2 })
      local dense = 128 * 64 + 2 * (4 * 64 * 64 + 2 * 64 + 4 * 64) + 64
      local expert = 2 * 4 * (2 * 4 * 64 * 64)
      assert.equal(6 * (dense + expert * 2 / 4) + 12 * 2 * 64 * 32,
         mfu.flops_per_token(specs, { n_layer = 2, n_embd = 64, t = 32, topk = 2, n_expert = 4 }))
   end)

   it("gives the recipe's mfu with --peak-tflops, in the progress line and the log", function()
      local root = assert(io.popen("pwd")):read("*l")
      local log = os.tmpname()
      local out, status = helpers.sh("cd /tmp && luajit " .. root .. "/recipes/gpt_small.lua "
         .. "--preset tiny --steps 2 --sample 0 --eval-max 1 --progress lines --peak-tflops 0.5 "
         .. "--log " .. log .. ".jsonl")
      assert.equal(0, status, out)
      assert.matches("tok/s  mfu +%d+%.%d%%", out)
      local recs = helpers.log_records(log .. ".jsonl")
      local specs = lw.models.specs("gpt", { n_layer = 4, n_embd = 64, n_head = 4, vocab = 256,
         seq_len = 32 })
      local per = mfu.flops_per_token(specs, { n_layer = 4, n_embd = 64, t = 32, topk = 1,
         n_expert = 1 })
      assert.near(recs[2].tokens_per_s * per / 0.5e12, recs[2].mfu, 1e-12)
      out = helpers.sh("cd /tmp && luajit " .. root .. "/recipes/gpt_small.lua --preset tiny "
         .. "--steps 1 --sample 0 --eval-max 1 --progress lines")
      assert.is_nil(out:find("mfu", 1, true)) -- no peak known for a CPU
      helpers.sh("rm -f " .. log .. "*")
   end)
end)
