-- cli_sample_spec.lua: `lwopt sample` as a user runs it after training with the recipe (tiny
-- preset, a few steps): from the checkpoint (its directory, a step-N directory) and from the
-- --save-params file it prints exactly the sample the run printed at its end, on bytes, with
-- bf16 parameters, on token shards (ids, and text through a tokenizer file the spec writes),
-- and from a run on 2 ranks; other settings give another sample; the errors name what is
-- missing.
local helpers = require("helpers")

local root = assert(io.popen("pwd")):read("*l")
local recipe = root .. "/recipes/gpt_small.lua"
local bin = root .. "/bin/lwopt"
local MPIRUN = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 mpirun -np 2 "
   .. "-x OPENBLAS_NUM_THREADS=1 "

-- The sample a recipe's or the command's output ends with: from "sample" to the end.
local function sample_of(out)
   return out:match("\n(sample[^\n]*:\n.*)$") or out:match("^(sample[^\n]*:\n.*)$")
end

-- Runs the command from /tmp (a user elsewhere); its stdout, stderr and status.
local function lwopt(args) return helpers.sh_apart("cd /tmp && " .. bin .. " " .. args) end

local function new_dir()
   local dir = helpers.tempdir()
   return dir
end

describe("lwopt sample", function()
   it("is listed by lwopt help, with its flags in lwopt sample --help", function()
      local out, status = helpers.sh(bin .. " help")
      assert.equal(0, status)
      assert.matches("\n  sample PATH [flags] text from a trained model", out, 1, true)
      out, status = helpers.sh(bin .. " sample --help")
      assert.equal(0, status)
      assert.matches("^usage: lwopt sample ", out)
   end)

   local dir
   before_each(function() dir = new_dir() end)
   after_each(function() helpers.sh("rm -rf " .. dir) end)

   it("prints the sample training printed, from the checkpoint and from its parameters file",
      function()
         local out, status = helpers.sh("luajit " .. recipe .. " --preset tiny --steps 4 --seed 5 "
            .. "--sample 60 --quiet --ckpt-dir " .. dir .. "/ck --save-params " .. dir
            .. "/final.safetensors")
         assert.equal(0, status, out)
         local expected = sample_of(out)
         assert.matches("^sample:\nAnd God said", expected)
         -- the --ckpt-dir (its latest checkpoint) and the step directory, with the run's seed
         local said, told, st = lwopt("sample " .. dir .. "/ck --tokens 60")
         assert.equal(0, st, told)
         assert.equal(expected, said)
         assert.equal("model: " .. dir .. "/ck/step-000000004, step 4: GPT 4 layers x 64, 4 heads, "
            .. "sequence 32, bytes\n", told)
         assert.equal(expected, (lwopt("sample " .. dir .. "/ck/step-000000004 --tokens 60")))
         -- the bare file: the seed given, the bytes drawn among read from --data (the recipe's
         -- default corpus)
         said, told = lwopt("sample " .. dir .. "/final.safetensors --tokens 60 --seed 5 --data "
            .. root .. "/data/kjv.txt")
         assert.equal(expected, said)
         -- its heads are the settings --save-params records, not a preset's guess
         assert.equal("model: " .. dir .. "/final.safetensors: GPT 4 layers x 64, 4 heads, "
            .. "sequence 32, bytes\n", told)
         -- without --data a bare file does not say which bytes the text holds
         said, told = lwopt("sample " .. dir .. "/final.safetensors --tokens 60 --seed 5")
         assert.matches("note: the checkpoint does not record which bytes its training text holds: "
            .. "drawing among all 256", told, 1, true)
         assert.matches("^sample:\nAnd God said", said)
         -- other settings, another sample of their length
         local others = { "--seed 6", "--temperature 1.5", "--top-k 3", "--prompt 'In the'" }
         for _, args in ipairs(others) do
            said = lwopt("sample " .. dir .. "/ck --tokens 60 " .. args)
            assert.are_not.equal(expected, said, args)
            assert.matches("^sample:\n", said)
         end
         said = lwopt("sample " .. dir .. "/ck --tokens 5 --prompt 'In the'")
         assert.matches("^sample:\nIn the.....\n$", said)
      end)

   it("prints the sample of a run with bf16 parameters", function()
      local out, status = helpers.sh("luajit " .. recipe .. " --preset tiny --steps 3 --sample 40 "
         .. "--param-dtype bf16 --quiet --ckpt-dir " .. dir)
      assert.equal(0, status, out)
      assert.equal(sample_of(out), (lwopt("sample " .. dir .. " --tokens 40")))
   end)

   it("prints a token run's ids, or the text --tokenizer decodes, as training printed them",
      function()
         local pattern = helpers.token_dataset(dir, 3000, 300)
         local pieces = {}
         for id = 0, 299 do pieces[id + 1] = "<" .. id .. ">" end
         local tok = helpers.tokenizer_file(pieces, { path = dir .. "/tok.bin" })
         local train = "luajit " .. recipe .. " --preset tiny --steps 3 --sample 12 --quiet "
            .. "--data '" .. pattern .. "' --vocab 300 --ckpt-dir " .. dir .. "/ck"
         local out, status = helpers.sh(train)
         assert.equal(0, status, out)
         local ids = sample_of(out)
         assert.matches("prompt: the first 8 validation tokens, then '|'%):\n[%d ]+ | [%d ]+\n$",
            ids)
         assert.equal(ids, (lwopt("sample " .. dir .. "/ck --tokens 12 --data '" .. pattern
            .. "'")))
         -- the same run with --tokenizer prints text; so does sample with it
         out, status = helpers.sh(train .. " --overwrite --tokenizer " .. tok)
         assert.equal(0, status, out)
         local text = sample_of(out)
         local prompt, rest = ids:match("\n([%d ]+) | ([%d ]+)\n$")
         local decoded = prompt:gsub("(%d+) ?", "<%1>") .. "|" .. rest:gsub("(%d+) ?", "<%1>")
         assert.equal("sample (decoded with tok.bin; prompt: the first 8 validation tokens, then "
            .. "'|'):\n" .. decoded .. "\n", text)
         assert.equal(text, (lwopt("sample " .. dir .. "/ck --tokens 12 --data '" .. pattern
            .. "' --tokenizer " .. tok)))
         -- the prompt as ids
         local said = lwopt("sample " .. dir .. "/ck --tokens 12 --prompt-ids "
            .. prompt:gsub(" ", ",") .. " --tokenizer " .. tok)
         assert.equal(text:gsub("the first 8 validation tokens", "8 tokens given"), said)
         -- the recipe takes --prompt-ids and --tokenizer too
         out = helpers.sh(train .. " --overwrite --sample 3 --prompt-ids 1,2 --tokenizer " .. tok)
         assert.matches("\nsample %(decoded with tok%.bin; prompt: 2 tokens given, then '|'%):\n"
            .. "<1><2>|<%d+><%d+><%d+>\n$", out)
      end)

   it("says what a token model's sample lacks, and refuses flags for the other kind", function()
      local pattern = helpers.token_dataset(dir, 3000, 300)
      local out, status = helpers.sh("luajit " .. recipe .. " --preset tiny --steps 1 --sample 0 "
         .. "--quiet --data '" .. pattern .. "' --vocab 300 --ckpt-dir " .. dir .. "/ck")
      assert.equal(0, status, out)
      local _, err, st = lwopt("sample " .. dir .. "/ck --prompt 'Once upon'")
      assert.equal(1, st)
      assert.matches("lwopt sample: --prompt 'Once upon': a text prompt on token data is encoded "
         .. "by a BPE tokenizer: give --tokenizer (lwopt's tokenizer file, tokenizer.json, or "
         .. "GPT-2's vocab.json and merges.txt; llm.c's gpt2_tokenizer.bin holds no merges), or "
         .. "the prompt's ids with --prompt-ids 1,2,3\n", err, 1, true)
      _, err, st = lwopt("sample " .. dir .. "/ck")
      assert.equal(1, st)
      assert.matches("lwopt sample: a model of token data needs a prompt: --prompt-ids 1,2,3, or "
         .. "--data with the shards it was trained on", err, 1, true)
      _, err, st = lwopt("sample " .. dir .. "/ck --prompt-ids 1,300")
      assert.equal(1, st)
      assert.matches("--prompt-ids: expected token ids below the vocabulary (300)", err, 1, true)
      _, err, st = lwopt("sample " .. dir .. "/ck --prompt-ids 1 --tokenizer "
         .. helpers.tokenizer_file({ "a", "b" }, { path = dir .. "/small.bin" }))
      assert.equal(1, st)
      assert.matches("--tokenizer " .. dir .. "/small.bin has 2 tokens, fewer than the model's "
         .. "vocabulary (300): another tokenizer?", err, 1, true)
      -- a flag that contradicts the checkpoint's model
      _, err, st = lwopt("sample " .. dir .. "/ck --prompt-ids 1 --n-head 8")
      assert.equal(1, st)
      assert.matches("lwopt sample: --n-head 8: the checkpoint's model has 4 (the flag is for a "
         .. "bare .safetensors file)", err, 1, true)
      -- usage errors: status 2
      for _, case in ipairs({
         { "", "lwopt: sample needs a checkpoint directory or a .safetensors file (lwopt sample "
           .. "--help lists them)\n" },
         { dir .. " x", "lwopt: unexpected argument 'x' (lwopt sample --help lists them)\n" },
         { dir .. " --prompt a --prompt-ids 1", "lwopt: --prompt and --prompt-ids both give the "
           .. "prompt: choose one (lwopt sample --help lists them)\n" },
         { dir .. " --temprature 1", "lwopt: unknown flag --temprature (did you mean "
           .. "--temperature?) (lwopt sample --help lists them)\n" },
      }) do
         _, err, st = lwopt("sample " .. case[1])
         assert.equal(2, st, case[1])
         assert.equal(case[2], err)
      end
   end)

   it("refuses the token flags for a model of bytes", function()
      local out, status = helpers.sh("luajit " .. recipe .. " --preset tiny --steps 1 --sample 0 "
         .. "--quiet --ckpt-dir " .. dir)
      assert.equal(0, status, out)
      local _, err, st = lwopt("sample " .. dir .. " --prompt-ids 1,2")
      assert.equal(1, st)
      assert.matches("lwopt sample: --prompt-ids is for a model of token data; this one was "
         .. "trained on bytes (its prompt: --prompt TEXT)\n", err, 1, true)
      out, status = helpers.sh("luajit " .. recipe .. " --preset tiny --steps 1 --tokenizer x")
      assert.equal(1, status)
      assert.matches("^%-%-tokenizer is for token shards", out)
   end)

   it("says what is missing for --device cuda on a machine without a GPU", function()
      if require("lwopt").has_cuda() then return pending("a GPU is here") end
      local out, status = helpers.sh("luajit " .. recipe .. " --preset tiny --steps 1 --sample 0 "
         .. "--quiet --ckpt-dir " .. dir)
      assert.equal(0, status, out)
      local _, err, st = lwopt("sample " .. dir .. " --device cuda")
      assert.equal(1, st)
      assert.matches("lwopt sample: lw.ddp.new: device: CUDA is not available: ", err, 1, true)
   end)

   it("prints the sample of a run on 2 ranks, alone or on 2 ranks itself #mpi", function()
      local out, status = helpers.sh(MPIRUN .. "luajit " .. recipe .. " --preset tiny --steps 3 "
         .. "--zero 2 --sample 40 --quiet --ckpt-dir " .. dir)
      assert.equal(0, status, out)
      local expected = sample_of(out)
      assert.equal(expected, (lwopt("sample " .. dir .. " --tokens 40")))
      local said = helpers.sh("cd /tmp && " .. MPIRUN .. bin .. " sample " .. dir
         .. " --tokens 40 2> /dev/null")
      assert.equal(expected, said)
   end)
end)
