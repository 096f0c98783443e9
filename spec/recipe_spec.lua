-- recipe_spec.lua: recipes/gpt_small.lua as a user runs it (from another directory): a short
-- run's output, flag and data errors with their messages, and routing rules that miss a
-- parameter stopping the run before any work.
local helpers = require("helpers")

local root = assert(io.popen("pwd")):read("*l")
local recipe = root .. "/recipes/gpt_small.lua"

describe("recipes/gpt_small.lua", function()
   it("trains the tiny preset, reports the validation loss and prints a sample", function()
      local log = os.tmpname() .. ".jsonl"
      local out, status = helpers.sh("cd /tmp && luajit " .. recipe .. " --preset tiny --steps 6 "
         .. "--eval-every 3 --sample 30 --progress lines --log " .. log)
      assert.equal(0, status)
      assert.matches("step     6/6  loss %d%.%d+", out)
      assert.matches("final validation loss %d%.%d+ %(%d%.%d+ bits/byte%)", out)
      assert.matches("sample:\nAnd God said", out, 1, true)
      local lines = 0
      for _ in io.lines(log) do lines = lines + 1 end
      assert.equal(6, lines)
      local png = log:gsub("%.jsonl$", ".png")
      assert.matches("loss curve: " .. png, out, 1, true)
      assert.is_not_nil(io.open(png))
      os.remove(log)
      os.remove(png)
   end)

   it("writes the parameters as safetensors that a separate reader loads", function()
      local file = os.tmpname() .. ".safetensors"
      local _, status = helpers.sh("luajit " .. recipe .. " --preset tiny --steps 2 --sample 0 "
         .. "--quiet --save-params " .. file)
      assert.equal(0, status)
      local t = helpers.read_safetensors(file, "h.0.attn.qkv.weight")
      assert.same({ 192, 64 }, t.shape)
      assert.equal(27, t.entries) -- wte, wpe, 4 layers x 6, ln_f
      os.remove(file)
   end)

   it("answers a mistyped flag with the usage and status 2", function()
      local out, status = helpers.sh("luajit " .. recipe .. " --step 5")
      assert.equal(2, status)
      assert.matches("unknown flag --step", out, 1, true)
      assert.matches("--steps INT", out, 1, true)
      out, status = helpers.sh("luajit " .. recipe .. " --mode zero")
      assert.equal(2, status)
      assert.matches("--mode must be one of layerwise|legacy|replicated, got 'zero'", out, 1, true)
   end)

   it("says how to get a missing corpus, on rank 0's message", function()
      local out, status = helpers.sh("luajit " .. recipe .. " --data /nonexistent/corpus.txt")
      assert.equal(1, status)
      assert.matches("[rank 0] lw.data: cannot read '/nonexistent/corpus.txt'", out, 1, true)
   end)

   it("stops before any work when a routing rule list leaves a parameter unmatched", function()
      local out, status = helpers.sh("luajit " .. root .. "/spec/fixtures/bad_rules.lua --preset tiny")
      assert.equal(1, status)
      assert.matches("lw.route: no rule matches parameter 'h.0.ln_1.weight'", out, 1, true)
      assert.is_nil(out:find("trained anyway", 1, true))
      assert.is_nil(out:find("step ", 1, true))
   end)

   it("refuses ZeRO and sharding combinations that cannot work, before any work", function()
      for _, case in ipairs({
         { "--shard rows", "--shard rows is row-sharded FSDP: it needs --zero 3" },
         { "--zero 2 --shard rows", "--shard rows is row-sharded FSDP: it needs --zero 3" },
         { "--zero 4", "--zero must be 1, 2 or 3, got 4" },
         { "--zero 3 --mode legacy", "--zero 3 shards gradients and parameters across ranks; "
           .. "--mode legacy keeps them whole" },
         { "--zero 2 --mode replicated", "--zero 2 shards gradients across ranks; --mode "
           .. "replicated keeps them whole" },
         { "--zero 3 --bucket-size 1000", "at ZeRO-3 a bucket group is gathered whole, but "
           .. "bucket_size 1000 is smaller than 'wte.weight' (16384 elements)" },
      }) do
         local out, status = helpers.sh("luajit " .. recipe .. " --preset tiny " .. case[1])
         assert.equal(1, status)
         assert.matches(case[2], out, 1, true)
         assert.is_nil(out:find("step ", 1, true))
      end
   end)

   it("trains at ZeRO-3, row-sharded too, and reports memory per rank", function()
      for _, args in ipairs({ "--zero 3", "--zero 3 --shard rows", "--zero 2" }) do
         local log = os.tmpname() .. ".jsonl"
         local out, status = helpers.sh("luajit " .. recipe .. " --preset tiny --steps 2 --sample 10 "
            .. "--progress lines --log " .. log .. " " .. args)
         assert.equal(0, status)
         assert.matches("final validation loss", out, 1, true)
         assert.matches("memory per rank %(MiB%): rank  params  grads  optimizer  activations  peak\n"
            .. "     0 +%d+%.%d+", out)
         local first = io.lines(log)()
         assert.matches('"memory_mb":{', first, 1, true)
         assert.matches('"peak":[', first, 1, true)
         os.remove(log)
         os.remove((log:gsub("%.jsonl$", ".png")))
      end
   end)
end)
