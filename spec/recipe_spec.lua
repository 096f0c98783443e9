-- recipe_spec.lua: recipes/gpt_small.lua as a user runs it (from another directory): a short
-- run's output on bytes and on token shards, data errors with their messages, the presets'
-- model shapes, and routing rules that miss a parameter stopping the run before any work. The
-- flags' refusals are recipe_flags_spec.lua's.
local ffi = require("ffi")
local helpers = require("helpers")
local lw = require("lwopt")

local root = assert(io.popen("pwd")):read("*l")
local recipe = root .. "/recipes/gpt_small.lua"
local MPIRUN = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 mpirun -np 2 "
   .. "-x OPENBLAS_NUM_THREADS=1 "

describe("recipes/gpt_small.lua", function()
   it("trains the tiny preset, reports the validation loss and prints a sample", function()
      local log = os.tmpname() .. ".jsonl"
      local out, status = helpers.sh("cd /tmp && luajit " .. recipe .. " --preset tiny --steps 6 "
         .. "--eval-every 3 --sample 30 --progress lines --log " .. log)
      assert.equal(0, status)
      assert.matches("\ndevice: cpu %(%d+ cores?, %d+%.%d GiB%)\n", out) -- where it trains
      assert.matches("step     6/6  loss %d%.%d+", out)
      assert.matches("final validation loss %d%.%d+ %(%d%.%d+ bits/byte%) over the first 64 of "
         .. "%d+ validation sequences %(%-%-eval%-max all: every one%)", out)
      assert.matches("val %d%.%d+ %(64 seq%)", out)
      assert.matches("sample:\nAnd God said", out, 1, true)
      -- the run's configuration first, then a record per step
      local steps, configs = helpers.log_records(log)
      assert.equal("config", lw.json.decode(io.lines(log)()).kind)
      assert.equal(1, #configs)
      assert.equal(6, #steps)
      local c = configs[1]
      assert.same({ 6, 3, "tiny", 8, 32, "muon" }, { c.flags.steps, c.flags["eval-every"],
         c.flags.preset, c.flags.batch, c.flags.seq, c.flags.optimizer }) -- preset's and given
      assert.equal(lw.version, c.lwopt_version)
      assert.same({ 1, 1 }, { c.ranks, #c.devices })
      assert.equal("cpu", c.devices[1].device)
      assert.matches("^%d%d%d%d%-%d%d%-%d%dT%d%d:%d%d:%d%d%.%d%d%dZ$", c.start_time)
      assert.is_true(c.start_wall_time <= steps[1].wall_time)
      assert.equal(c.tokens_per_step * 6, steps[6].tokens)
      for i, rec in ipairs(steps) do assert.same({ "step", i }, { rec.kind, rec.step }) end
      assert.same({ 64, 64 }, { steps[3].val_sequences, steps[6].val_sequences })
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

   it("prints --help once under mpirun, not once per rank #mpi", function()
      local out, status = helpers.sh(MPIRUN .. "luajit " .. recipe .. " --help")
      assert.equal(0, status, out)
      local count = 0
      for _ in out:gmatch("usage: ") do count = count + 1 end
      assert.equal(1, count, out)
   end)

   it("warns when the warmup outlasts the run, even with --quiet", function()
      local out, status = helpers.sh("luajit " .. recipe .. " --preset tiny --steps 2 --sample 0 "
         .. "--quiet")
      assert.equal(0, status, out)
      assert.matches("warning: --warmup 10 (--preset tiny's) is longer than the run (--steps 2): "
         .. "the learning rate stops at 0.0006, short of its peak 0.003 (lower --warmup or raise "
         .. "--steps)\n", out, 1, true)
      out = helpers.sh("luajit " .. recipe .. " --preset tiny --steps 3 --warmup 3 --sample 0 "
         .. "--quiet")
      assert.is_nil(out:find("warning", 1, true), out)
   end)

   it("says what is missing for --device cuda on a machine without a GPU", function()
      if lw.has_cuda() then return pending("a GPU is here") end
      local out, status = helpers.sh("luajit " .. recipe .. " --device cuda --steps 1")
      assert.equal(1, status)
      -- the library not built (it names where it looked), or no driver, or no device
      assert.matches("^%-%-device cuda: device: CUDA is not available: .+; use %-%-device cpu\n$",
         out)
   end)

   it("says how to get a missing corpus, and names a directory given as data", function()
      local out, status = helpers.sh("luajit " .. recipe .. " --data /nonexistent/corpus.txt")
      assert.equal(1, status)
      assert.equal("lw.data: cannot read '/nonexistent/corpus.txt' (/nonexistent/corpus.txt: No "
         .. "such file or directory)\n", out)
      out, status = helpers.sh("luajit " .. recipe .. " --data /tmp")
      assert.equal(1, status)
      assert.equal("lw.data: cannot read '/tmp': it is a directory, not a text file\n", out)
   end)

   it("names the size of activations that do not fit", function()
      -- (the CPU attention's scratch grows with t, not t^2: a large batch it is)
      local out, status = helpers.sh("luajit " .. recipe
         .. " --preset tiny --seq 100000 --batch 4096 --quiet")
      assert.equal(1, status)
      assert.matches("lw.nn: cannot allocate the activations 'y' of the model: memory: cannot "
         .. "allocate 97.66 GiB", out, 1, true)
      assert.is_nil(out:find("traceback", 1, true))
   end)

   it("stops before any work when a routing rule list leaves a parameter unmatched", function()
      local out, status = helpers.sh("luajit " .. root .. "/spec/fixtures/bad_rules.lua --preset tiny")
      assert.equal(1, status)
      assert.matches("lw.route: no rule matches parameter 'h.0.ln_1.weight'", out, 1, true)
      assert.is_nil(out:find("trained anyway", 1, true))
      assert.is_nil(out:find("step ", 1, true))
   end)

   it("says at start-up how the routing rules split the parameters between the optimizer rules",
      function()
      local routing = "routing: muon %d matrices (%.2fM elements), adamw %d tensors (%.2fM "
         .. "elements)\n"
      local tiny = " --preset tiny --steps 1 --sample 0 --eval-max 1"
      -- tiny: 4 layers of qkv, proj, fc and proj matrices; wte, wpe, 2 gains a layer and ln_f
      local muon = 4 * (3 * 64 * 64 + 64 * 64 + 2 * 256 * 64)
      local adamw = 256 * 64 + 32 * 64 + 9 * 64
      for _, case in ipairs({
         { "luajit " .. recipe .. tiny, routing:format(16, muon / 1e6, 11, adamw / 1e6) },
         -- recipes/gpt_routing.lua keeps the attention's output projections on AdamW
         { "luajit " .. root .. "/recipes/gpt_routing.lua" .. tiny, routing:format(12,
           (muon - 4 * 64 * 64) / 1e6, 15, (adamw + 4 * 64 * 64) / 1e6) },
         -- a rule nothing is routed to is left out
         { "luajit " .. recipe .. tiny .. " --optimizer adamw",
           ("routing: adamw %d tensors (%.2fM elements)\n"):format(27, (muon + adamw) / 1e6) },
      }) do
         local out, status = helpers.sh("cd /tmp && " .. case[1])
         assert.equal(0, status, out)
         assert.matches("^lwopt [^\n]*\n" .. case[2]:gsub("%p", "%%%0"), out)
      end
      local gpt_recipe = require("lwopt.app.recipe")
      assert.equal("routing: muon 1 matrix (0.00M elements), adamw 2 tensors (1.50M elements)",
         gpt_recipe.routing_text({ { name = "a", shape = { 2, 3 }, optimizer = "muon" },
            { name = "b", shape = { 1000, 1000 }, optimizer = "adamw" },
            { name = "c", shape = { 500000 }, optimizer = "adamw" } }))
   end)

   it("finds the default corpus of the lwopt tree from a routing recipe copied elsewhere",
      function()
      local dir = helpers.fresh_path()
      assert.equal(0, select(2, helpers.sh("mkdir -p " .. dir .. " && cp " .. root
         .. "/recipes/gpt_routing.lua " .. dir .. "/my_routing.lua")))
      local args = " --preset tiny --steps 1 --sample 0 --eval-max 1 --progress lines"
      for _, case in ipairs({
         -- bin/lwopt run puts the tree's lua/ on the path; so does LUA_PATH for luajit
         { root .. "/bin/lwopt run " .. dir .. "/my_routing.lua", root .. "/bin/.." },
         { "LUA_PATH='" .. root .. "/lua/?.lua;" .. root .. "/lua/?/init.lua;" .. root
           .. "/build/lua/?.lua;;' luajit " .. dir .. "/my_routing.lua", root },
      }) do
         local out, status = helpers.sh("cd " .. dir .. " && " .. case[1] .. args)
         assert.equal(0, status, out)
         assert.matches("; " .. case[2] .. "/data/kjv.txt (4298239 bytes)\n", out, 1, true)
         assert.matches("routing: muon 12 matrices", out, 1, true)
         assert.matches("step     1/1  loss", out, 1, true)
      end
      helpers.sh("rm -rf " .. dir)
   end)

   it("counts the whole model in the routing line at --tp 2 #mpi", function()
      local args = " --preset tiny --steps 1 --sample 0 --eval-max 1 --timeout 30"
      local one, status1 = helpers.sh("luajit " .. recipe .. args)
      local two, status2 = helpers.sh(MPIRUN .. "luajit " .. recipe .. args .. " --tp 2")
      assert.same({ 0, 0 }, { status1, status2 }, two)
      -- found anywhere in the output: under mpirun another rank's lines may come beside it
      local line = one:match("(routing: muon [^\n]*)")
      assert.is_not_nil(line, one)
      assert.equal(line, two:match("(routing: muon [^\n]*)"))
   end)

   it("trains at ZeRO-3, row-sharded too, and reports memory per rank", function()
      for _, args in ipairs({ "--zero 3", "--zero 3 --shard rows", "--zero 2",
         "--param-dtype bf16 --grad-dtype bf16" }) do
         local log = os.tmpname() .. ".jsonl"
         local out, status = helpers.sh("luajit " .. recipe .. " --preset tiny --steps 2 --sample 10 "
            .. "--progress lines --log " .. log .. " " .. args)
         assert.equal(0, status)
         assert.matches("final validation loss", out, 1, true)
         assert.matches("memory per rank %(MiB%): rank  params  master  grads  optimizer  "
            .. "activations  peak\n"
            .. "     0 +%d+%.%d+", out)
         local lines = io.lines(log)
         lines() -- the configuration record
         local first = lines()
         assert.matches('"memory_mb":{', first, 1, true)
         -- fp32 master weights exactly when the parameters are bf16
         local master = tonumber(first:match('"master":%[([%d%.]+)'))
         assert.equal(args:find("bf16", 1, true) ~= nil, master > 0)
         assert.matches('"peak":[', first, 1, true)
         os.remove(log)
         os.remove((log:gsub("%.jsonl$", ".png")))
      end
   end)

   describe("on token shards", function()
      local dir, pattern
      before_each(function()
         dir = helpers.tempdir()
         pattern = helpers.token_dataset(dir, 3000, 300)
      end)
      after_each(function() helpers.sh("rm -rf " .. dir) end)

      it("trains, says tokens and the vocabulary, and samples token ids", function()
         local file = dir .. "/params.safetensors"
         local out, status = helpers.sh("cd /tmp && luajit " .. recipe .. " --preset tiny --data '"
            .. pattern .. "' --vocab 300 --steps 3 --eval-every 3 --sample 5 --progress lines "
            .. "--save-params " .. file)
         assert.equal(0, status, out)
         assert.matches("global batch 8 x 32 tokens; " .. pattern .. " (2 shards, 6000 tokens; "
            .. "validation: " .. dir .. "/t_val_*.bin (1 shard, 600 tokens)); vocabulary 300 "
            .. "(384 rows)\n", out, 1, true)
         assert.matches("step     3/3  loss %d%.%d+", out)
         assert.matches("final validation loss %d%.%d+ %(%d+%.%d+ bits/token%)", out)
         assert.matches("\nsample %(token ids; no tokenizer for token shards; prompt: the first 8 "
            .. "validation tokens, then '|'%):\n%d+ %d+ %d+ %d+ %d+ %d+ %d+ %d+ | %d+ %d+ %d+ %d+ "
            .. "%d+\n", out)
         -- the embedding (tied LM head) has the vocabulary padded to a multiple of 128
         assert.same({ 384, 64 }, helpers.read_safetensors(file, "wte.weight").shape)
      end)

      it("takes --val-data, and the last 5% without validation shards", function()
         local out, status = helpers.sh("luajit " .. recipe .. " --preset tiny --data '" .. pattern
            .. "' --val-data " .. dir .. "/t_train_001.bin --vocab 300 --steps 1 --sample 0")
         assert.equal(0, status, out)
         assert.matches("validation: " .. dir .. "/t_train_001.bin (1 shard, 3000 tokens)", out, 1,
            true)
         os.remove(dir .. "/t_val_000.bin")
         out, status = helpers.sh("luajit " .. recipe .. " --preset tiny --data '" .. pattern
            .. "' --vocab 300 --steps 1 --sample 0")
         assert.equal(0, status, out)
         assert.matches("(2 shards, 5700 tokens; validation: the last 300 tokens)", out, 1, true)
      end)

      it("names the shard and the id of a token outside the vocabulary", function()
         local out, status = helpers.sh("luajit " .. recipe .. " --preset tiny --data '" .. pattern
            .. "' --vocab 200 --steps 1 --warmup 1 --sample 0 --quiet")
         assert.equal(1, status)
         assert.matches("^lw%.tokens: token_shards: " .. dir:gsub("%p", "%%%0")
            .. "/t_train_00[01]%.bin: token 2%d%d at position %d+ is outside the vocabulary "
            .. "%[0, 200%) %(the vocabulary is 200; %-%-vocab sets it%)\n$", out)
         out, status = helpers.sh("luajit " .. recipe .. " --data '" .. pattern .. "' --steps 1 "
            .. "--sample 0 --prompt '1 x'")
         assert.equal(1, status)
         assert.equal("--prompt: expected token ids below the vocabulary (50257), separated by "
            .. "commas or spaces; got 'x' (with token shards --prompt is token ids: text cannot be "
            .. "encoded into tokens, a tokenizer file holds no BPE merges)\n", out)
      end)

      it("names a pattern that matches nothing, and refuses token flags with a text file",
         function()
            local out, status = helpers.sh("luajit " .. recipe .. " --data '" .. dir
               .. "/fineweb_train_*.bin'")
            assert.equal(1, status)
            assert.equal("lw.tokens: no file matches '" .. dir .. "/fineweb_train_*.bin'\n", out)
            out, status = helpers.sh("luajit " .. recipe .. " --preset tiny --vocab 300")
            assert.equal(1, status)
            assert.equal("--vocab 300: a text file is read as bytes, a vocabulary of 256 (--vocab "
               .. "is for token shards: a .bin path or a pattern in --data)\n", out)
            out, status = helpers.sh("luajit " .. recipe .. " --preset tiny --val-data '"
               .. pattern .. "'")
            assert.equal(1, status)
            assert.matches("^%-%-val%-data is for token shards", out)
         end)
   end)

   describe("with experts", function()
      it("trains a mixture of experts: the loss falls, the log counts tokens per expert",
         function()
         local log = os.tmpname() .. ".jsonl"
         local out, status = helpers.sh("cd /tmp && luajit " .. recipe .. " --preset moe "
            .. "--shared-expert --steps 8 --warmup 2 --seq 32 --batch 4 --eval-every 0 "
            .. "--sample 0 --progress lines --log " .. log)
         assert.equal(0, status, out)
         -- the announce line: experts, top-k, total and active parameters
         local total, active = out:match("GPT 4 layers x 128, 4 heads, 8 experts, top%-2 %(%+ a "
            .. "shared expert%), (%d+%.%d+)M parameters, (%d+%.%d+)M active per token;")
         assert.is_not_nil(total, out)
         -- per layer: 8 experts of 2 x 128 x 512 weights, 2 of them active per token
         assert.near(tonumber(total) - 4 * 8 * 131072 * 6 / 8 / 1e6, tonumber(active), 0.011)
         local records = helpers.log_records(log)
         assert.equal(8, #records)
         assert.is_true(records[8].loss < records[1].loss - 0.2,
            ("%g -> %g"):format(records[1].loss, records[8].loss))
         for _, rec in ipairs(records) do
            assert.equal(4, #rec.expert_counts)
            for _, layer in ipairs(rec.expert_counts) do
               local sum = 0
               for _, c in ipairs(layer) do sum = sum + c end
               assert.equal(4 * 32 * 2, sum) -- every token at 2 experts
            end
            assert.is_number(rec.experts_idle)
            assert.is_true(rec.aux_loss > 0)
         end
         os.remove(log)
         os.remove((log:gsub("%.jsonl$", ".png")))
      end)

      it("refuses configurations that cannot route, before any work, naming the numbers",
         function()
         for _, case in ipairs({
            { "--n-expert 1", 1, "--n-expert 1: a mixture of experts needs at least 2 (0: a "
              .. "dense MLP)" },
            { "--n-expert 4 --mlp-hidden 64", 1, "--mlp-hidden sizes the dense MLP, which a "
              .. "mixture of experts replaces: drop it, or add --n-expert 0" },
            { "--n-expert 4 --topk 0", 2, "--topk must be between 1 and 65536, got 0 (--help "
              .. "lists the flags)" },
            { "--n-expert 2 --topk 3", 1, "--topk 3 is more than the 2 experts (--n-expert): "
              .. "each token goes to topk distinct experts" },
            { "--preset moe --topk 9", 1, "--topk 9 is more than the 8 experts (--n-expert, "
              .. "--preset moe's): each token goes to topk distinct experts" },
            { "--topk 2", 1, "--topk is for a mixture of experts: add --n-expert (or --preset "
              .. "moe)" },
            { "--shared-expert", 1, "--shared-expert is for a mixture of experts: add "
              .. "--n-expert (or --preset moe)" },
            { "--n-expert 4 --aux-coef -1", 2, "--aux-coef must be >= 0, got -1 (--help lists "
              .. "the flags)" },
            { "--n-expert 4 --ep 3", 1, "--ep 3 does not divide the 4 experts (each EP rank "
              .. "holds n_expert / ep of them)" },
            { "--n-expert 4 --ep 2", 2, "--ep 2 does not divide the 1 rank (the world splits "
              .. "into groups of ep ranks)" },
            { "--ep 2", 1, "--ep 2 needs a mixture of experts (n_expert is 0)" },
         }) do
            local out, status = helpers.sh("luajit " .. recipe .. " --preset tiny "
               .. case[1]:gsub("%-%-preset tiny %-%-preset", "--preset"))
            assert.equal(case[2], status, case[1])
            assert.equal(case[3] .. "\n", out)
         end
      end)

      it("refuses to resume a checkpoint of another number of experts", function()
         local dir = helpers.fresh_path()
         local base = "luajit " .. recipe .. " --preset tiny --sample 0 --quiet --steps 2 "
         local out, status = helpers.sh(base .. "--n-expert 4 --ckpt-dir " .. dir)
         assert.equal(0, status, out)
         out, status = helpers.sh(base .. "--n-expert 2 --resume --ckpt-dir " .. dir)
         assert.equal(1, status)
         assert.matches("--resume: this run has --n-expert 2, but the checkpoint was trained "
            .. "with --n-expert 4", out, 1, true)
         out, status = helpers.sh(base .. "--resume --ckpt-dir " .. dir)
         assert.equal(1, status)
         assert.matches("this run has --n-expert 0, but the checkpoint was trained with "
            .. "--n-expert 4", out, 1, true)
         out, status = helpers.sh(base .. "--steps 3 --n-expert 4 --topk 1 --resume --ckpt-dir "
            .. dir)
         assert.equal(0, status, out)
         assert.matches("settings changed since the checkpoint: --steps 3 (was 2), --topk 1 "
            .. "(was 2)", out, 1, true)
         helpers.sh("rm -rf " .. dir)
      end)

      it("trains the moe preset dense with --n-expert 0, at the experts' active parameters "
         .. "with --mlp-hidden", function()
         local out, status = helpers.sh("luajit " .. recipe .. " --preset moe --n-expert 0 "
            .. "--mlp-hidden 1028 --steps 1 --batch 1 --eval-max 1 --sample 0")
         assert.equal(0, status, out)
         -- 2 x 128 x 1028 per layer: a router (8 x 128) and 2 of 8 experts of 2 x 128 x 512
         assert.matches("GPT 4 layers x 128, 4 heads, 1.37M parameters;", out, 1, true)
         local gpt_recipe = require("lwopt.app.recipe")
         local dense = lw.arch.gpt(gpt_recipe.gpt_config("moe", 256, nil, { n_expert = 0 }, 1028))
         assert.same({ 1028, 128 }, dense[4 + 3].shape) -- h.0.mlp.fc, after wte, wpe, ln_1..ln_2
         assert.equal("h.0.mlp.fc.weight", dense[4 + 3].name)
      end)

      it("logs each rank's Muon time and the all-to-all bytes at --ep 2 #mpi", function()
         local log = os.tmpname() .. ".jsonl"
         local mpirun = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 "
            .. "mpirun -np 2 -x OPENBLAS_NUM_THREADS=1 "
         for _, ep in ipairs({ 1, 2 }) do
            local out, status = helpers.sh(("%sluajit %s --preset moe --ep %d --steps 2 --seq 16 "
               .. "--batch 2 --eval-max 1 --sample 0 --quiet --overwrite --log %s"):format(mpirun,
               recipe, ep, log))
            assert.equal(0, status, out)
            for _, rec in ipairs(helpers.log_records(log)) do
               assert.equal(2, #rec.by_rank.muon_ms)
               assert.is_true(rec.by_rank.muon_ms[1] > 0 and rec.by_rank.muon_ms[2] > 0)
               if ep == 1 then
                  assert.equal(0, rec.alltoall_mb)
               else
                  -- rows to the other rank's experts and back, forward and backward: at most
                  -- 4 x the 2 x 16 x 2 rows of 128 floats a rank routes, in each of 4 layers
                  -- (and the row counts, 4 int64 a layer)
                  local most = (4 * 4 * (2 * 16 * 2) * 128 * 4 + 4 * 4 * 8) / 2 ^ 20
                  assert.is_true(rec.alltoall_mb > 0 and rec.alltoall_mb <= most,
                     tostring(rec.alltoall_mb))
                  assert.is_true(rec.comm_mb > rec.alltoall_mb)
                  assert.near(rec.alltoall_mb, rec.by_rank.alltoall_mb[1], 0.01)
               end
            end
         end
         os.remove(log)
         os.remove((log:gsub("%.jsonl$", ".png")))
      end)

      it("trains to its end at --ep 2: every rank samples, rank 0 prints, and the start-up "
         .. "line counts the whole model #mpi", function()
         local args = " --preset moe --steps 1 --seq 16 --batch 2 --eval-max 1 --sample 12 "
            .. "--timeout 30"
         local one, status1 = helpers.sh("luajit " .. recipe .. args)
         local two, status2 = helpers.sh(MPIRUN .. "luajit " .. recipe .. args .. " --ep 2")
         assert.equal(0, status1, one)
         assert.equal(0, status2, two)
         local function parameters(out)
            return out:match("8 experts, top%-2, (%d+%.%d+M parameters, %d+%.%d+M active) per "
               .. "token")
         end
         assert.is_not_nil(parameters(one), one)
         assert.equal(parameters(one), parameters(two))
         -- and so does the routing line: every expert, not this rank's share (anywhere in
         -- the output: under mpirun another rank's lines may come before or beside it)
         local function routing_line(out) return out:match("(routing: muon [^\n]*)") end
         assert.equal(routing_line(one), routing_line(two))
         assert.is_not_nil(routing_line(one), one)
         local samples = 0
         for _ in two:gmatch("\nsample:\nAnd God said") do samples = samples + 1 end
         assert.equal(1, samples, two)
      end)

      it("has a moe preset: 4 layers x 128, 8 experts, top-2", function()
         local gpt_recipe = require("lwopt.app.recipe")
         local cfg = gpt_recipe.gpt_config("moe", 256)
         assert.same({ 4, 128, 8, 2, 0.01, false }, { cfg.n_layer, cfg.n_embd, cfg.n_expert,
            cfg.topk, cfg.aux_coef, cfg.shared_expert })
         assert.is_nil(gpt_recipe.gpt_config("tiny", 256).n_expert)
         local specs = lw.nn.GPT.new(cfg):parameters()
         assert.equal(lw.arch.numel(lw.arch.gpt(cfg)), lw.arch.numel(specs))
      end)
   end)

   describe("with tensor parallelism (--tp)", function()
      it("refuses what cannot work yet, before any work, naming the numbers", function()
         for _, case in ipairs({
            { "--tp 2", 2, "--tp 2 does not divide the 1 rank (the world splits into "
              .. "TP groups of tp consecutive ranks)" },
            { "--tp 3", 1, "--tp 3 does not divide the 4 attention heads (each TP rank "
              .. "holds n_head / tp heads) (--preset tiny: 4 heads, n_embd 64)" },
            { "--muon-tp-mode blockwise", 1, "--muon-tp-mode says how Muon treats matrices "
              .. "split by tensor parallelism: add --tp" },
            { "--tp 2 --n-expert 4", 1, "--tp 2 with a mixture of experts (4 experts): "
              .. "tensor parallelism splits dense models only for now" },
            { "--tp 2 --n-expert 4 --ep 2", 1, "--tp 2 with ep 2: tensor and expert "
              .. "parallelism together are not supported yet (use one of them)" },
         }) do
            local out, status = helpers.sh("luajit " .. recipe .. " --preset tiny " .. case[1])
            assert.equal(case[2], status, case[1])
            assert.equal(case[3] .. "\n", out)
         end
      end)

      it("trains at tp 2 as at tp 1, clipping included: the same losses, sample and parameters #mpi", function()
         local mpirun = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 "
            .. "mpirun -np 2 -x OPENBLAS_NUM_THREADS=1 "
         local args = " --preset tiny --steps 4 --optimizer adamw --clip 0.5 --sample 20 --quiet "
            .. "--save-params "
         local one, two = os.tmpname(), os.tmpname()
         local out1, status1 = helpers.sh("luajit " .. recipe .. args .. one)
         local log = os.tmpname()
         local out2, status2 = helpers.sh(mpirun .. "luajit " .. recipe .. args .. two
            .. " --tp 2 --log " .. log)
         assert.same({ 0, 0 }, { status1, status2 }, out2)
         -- the log counts the TP group's traffic (at dp 1, all of it): the row-parallel layers'
         -- all-reduces of b x t x n_embd floats, 2 a layer forward, 2 backward at least
         local steps, configs = helpers.log_records(log)
         -- both ranks and their devices, the TP split
         assert.same({ 2, 2, 1 }, { configs[1].ranks, #configs[1].devices, configs[1].dp })
         assert.same({ 0, 1 }, { configs[1].devices[1].rank, configs[1].devices[2].rank })
         for _, rec in ipairs(steps) do
            local least = 4 * 4 * (8 * 32 * 64 * 4) / 2 ^ 20
            assert.is_true(rec.tp_mb >= least and rec.comm_mb == rec.tp_mb,
               ("tp_mb %s, comm_mb %s"):format(tostring(rec.tp_mb), tostring(rec.comm_mb)))
         end
         os.remove(log)
         os.remove((log:gsub("%.jsonl$", "") .. ".png"))
         -- the final validation loss and the sample, as printed
         local function tail(out)
            return out:match("final validation loss.*$"):gsub("parameters: %S+", "")
               :gsub("loss curve: %S+\n", "")
         end
         assert.equal(tail(out1), tail(out2))
         -- every tensor of both files by name: the same names and shapes, values within 1e-5
         local function tensors(path)
            local f = assert(io.open(path, "rb"))
            local raw = f:read("*a")
            f:close()
            local n = 0
            for i = 8, 1, -1 do n = n * 256 + raw:byte(i) end
            local header = lw.json.decode(raw:sub(9, 8 + n))
            local out = {}
            for name, t in pairs(header) do
               if name ~= "__metadata__" then
                  local a, b = t.data_offsets[1], t.data_offsets[2]
                  -- a pointer into raw, which the entry keeps alive
                  out[name] = { shape = t.shape, keep = raw, count = (b - a) / 4,
                     data = ffi.cast("const float *", ffi.cast("const char *", raw) + 8 + n + a) }
               end
            end
            return out
         end
         local a, b = tensors(one), tensors(two)
         local worst, count = 0, 0
         for name, x in pairs(a) do
            count = count + 1
            assert.same(x.shape, b[name] and b[name].shape, name)
            for i = 0, x.count - 1 do
               worst = math.max(worst, math.abs(x.data[i] - b[name].data[i]))
            end
         end
         assert.equal(27, count)
         for name in pairs(b) do assert.truthy(a[name], name) end
         assert.is_true(worst < 1e-5, tostring(worst))
         os.remove(one)
         os.remove(two)
      end)
   end)

   it("has a gpt2 preset: GPT-2 124M with its vocabulary padded to 50304", function()
      local gpt_recipe = require("lwopt.app.recipe")
      local p = gpt_recipe.presets.gpt2
      assert.same({ 12, 768, 12, 1024, 50257 }, { p.n_layer, p.n_embd, p.n_head, p.seq, p.vocab })
      local cfg = gpt_recipe.gpt_config("gpt2", p.vocab)
      assert.equal(50304, cfg.vocab)
      local specs = lw.nn.GPT.new(cfg):parameters()
      assert.same({ 50304, 768 }, specs[1].shape)
      assert.equal("wte.weight", specs[1].name)
      -- wte 50304 x 768 + wpe 1024 x 768 + 12 x (qkv 2304 x 768 + proj 768 x 768 + fc 3072 x 768
      -- + proj 768 x 3072 + two norm gains of 768) + ln_f 768, tied and without biases:
      -- 38633472 + 786432 + 12 x 7079424 + 768; nanoGPT's 124475904 adds 102144 biases
      assert.equal(124373760, lw.arch.numel(specs))
      assert.equal(124373760, lw.arch.numel(lw.arch.gpt(cfg)))
      assert.equal(124475904, lw.arch.numel(lw.arch.gpt{ n_layer = 12, n_embd = 768,
         n_head = 12, vocab = 50304, seq_len = 1024, tied = true, bias = true }))
      -- byte data keeps 256, already a multiple of 128
      assert.equal(256, gpt_recipe.gpt_config("gpt2", 256).vocab)
      assert.equal(384, gpt_recipe.vocab_rows(300))
   end)
end)
