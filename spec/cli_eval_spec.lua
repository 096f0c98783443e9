-- cli_eval_spec.lua: `lwopt eval` as a user runs it after training with the recipe (tiny preset,
-- a few steps): over the data the run trained on, the validation loss of its last checkpoint is
-- the final validation loss the run reported (and logged, in full precision), on bytes, on token
-- shards with the run's --eval-max, from the --save-params file, and for a run on 2 ranks; the
-- errors name what is missing.
local helpers = require("helpers")
local json = require("lwopt.json")

local root = assert(io.popen("pwd")):read("*l")
local recipe = root .. "/recipes/gpt_small.lua"
local bin = root .. "/bin/lwopt"
local MPIRUN = "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 120 mpirun -np 2 "
   .. "-x OPENBLAS_NUM_THREADS=1 "

-- Runs the command from /tmp; its stdout, stderr and status.
local function lwopt(args, launcher)
   return helpers.sh_apart("cd /tmp && " .. (launcher or "") .. bin .. " " .. args)
end

-- The validation loss of the last record of a JSON-lines log.
local function logged_loss(log)
   local last
   for line in io.lines(log) do last = line end
   return json.decode(last).val_loss
end

describe("lwopt eval", function()
   it("is listed by lwopt help, with its flags in lwopt eval --help", function()
      local out, status = helpers.sh(bin .. " help")
      assert.equal(0, status)
      assert.matches("\n  eval PATH --data D  a trained model's validation loss over D", out, 1,
         true)
      out, status = helpers.sh(bin .. " eval --help")
      assert.equal(0, status)
      assert.matches("^usage: lwopt eval ", out)
   end)

   local dir
   before_each(function() dir = helpers.tempdir() end)
   after_each(function() helpers.sh("rm -rf " .. dir) end)

   it("gives the final validation loss of the run, from its checkpoint and parameters file",
      function()
         local kjv = root .. "/data/kjv.txt"
         local out, status = helpers.sh("luajit " .. recipe .. " --preset tiny --steps 4 "
            .. "--batch 4 --sample 0 --quiet --ckpt-dir " .. dir .. "/ck --log " .. dir
            .. "/log.jsonl --save-params " .. dir .. "/final.safetensors")
         assert.equal(0, status, out)
         local loss, bits = out:match("final validation loss (%d%.%d+) %((%d+%.%d+) bits/byte%)")
         local said, told, st = lwopt("eval " .. dir .. "/ck --data " .. kjv)
         assert.equal(0, st, told)
         assert.equal(("validation loss %s (%s bits/byte; 64 sequences of 32 bytes)\n"):format(
            loss, bits), said)
         assert.equal("model: " .. dir .. "/ck/step-000000004, step 4: GPT 4 layers x 64, 4 heads, "
            .. "sequence 32, bytes\n", told)
         -- in full precision: the same number, the same batches summed in the same order
         said = lwopt("eval " .. dir .. "/ck --data " .. kjv .. " --json")
         local r = json.decode(said)
         assert.equal(logged_loss(dir .. "/log.jsonl"), r.val_loss)
         assert.same({ 64, 32, 4, "byte", 4 }, { r.sequences, r.seq, r.batch, r.unit, r.step })
         -- the bare file with the run's --batch: the same. Another --batch puts other rows in
         -- one fp32 GEMM (a row's logits may round otherwise: 1e-7 of a logit at most) and sums
         -- the rows' losses (in double) in another order: the same loss within 1e-6
         said = lwopt("eval " .. dir .. "/final.safetensors --batch 4 --data " .. kjv .. " --json")
         assert.equal(r.val_loss, json.decode(said).val_loss)
         said = lwopt("eval " .. dir .. "/final.safetensors --data " .. kjv .. " --json")
         assert.equal(8, json.decode(said).batch)
         assert.is_true(math.abs(json.decode(said).val_loss - r.val_loss) < 1e-6 * r.val_loss)
         -- fewer sequences, another loss
         said = lwopt("eval " .. dir .. "/ck --data " .. kjv .. " --json --eval-max 3")
         assert.equal(3, json.decode(said).sequences)
         assert.are_not.equal(r.val_loss, json.decode(said).val_loss)
         -- the whole split: every sequence of it, said
         said, told, st = lwopt("eval " .. dir .. "/ck --data " .. kjv .. " --eval-max all")
         assert.equal(0, st, told)
         local all = tonumber(said:match("; (%d+) sequences of 32 bytes%)"))
         assert.is_true(all > 1000, said)
         local data = require("lwopt.data").load(kjv, { seq_len = 32 })
         assert.equal(data:val_count(32, math.huge), all)
      end)

   it("takes the run's --eval-max and its validation shards on token data", function()
      local pattern = helpers.token_dataset(dir, 3000, 300)
      local log = dir .. "/log.jsonl"
      local out, status = helpers.sh("luajit " .. recipe .. " --preset tiny --steps 3 --sample 0 "
         .. "--quiet --eval-max 5 --data '" .. pattern .. "' --vocab 300 --ckpt-dir " .. dir
         .. "/ck --log " .. log)
      assert.equal(0, status, out)
      local said, told = lwopt("eval " .. dir .. "/ck --data '" .. pattern .. "' --json")
      local r = json.decode(said)
      assert.equal(logged_loss(log), r.val_loss, told)
      assert.same({ 5, "token" }, { r.sequences, r.unit })
      -- other validation shards: another loss, and the same as the run's with them
      said = lwopt("eval " .. dir .. "/ck --data '" .. pattern .. "' --val-data " .. dir
         .. "/t_train_001.bin --json")
      assert.are_not.equal(r.val_loss, json.decode(said).val_loss)
   end)

   it("gives the final validation loss of a run on 2 ranks, alone or on 2 ranks #mpi", function()
      local log = dir .. "/log.jsonl"
      local out, status = helpers.sh(MPIRUN .. "luajit " .. recipe .. " --preset tiny --steps 3 "
         .. "--sample 0 --quiet --zero 3 --ckpt-dir " .. dir .. " --log " .. log)
      assert.equal(0, status, out)
      local args = "eval " .. dir .. " --data " .. root .. "/data/kjv.txt --json"
      -- on 2 ranks, each rank's batches summed, then the two sums: the run's order exactly
      local said, told, st = lwopt(args, MPIRUN)
      assert.equal(0, st, told)
      assert.equal(logged_loss(log), json.decode(said).val_loss)
      -- on one rank with one BLAS thread, as each of the 2 ranks had: the same batches through
      -- the same GEMM kernels, so the same losses, their sums added in another order: double
      -- rounding only, within 1e-12
      said = lwopt(args, "OPENBLAS_NUM_THREADS=1 ")
      local loss = json.decode(said).val_loss
      assert.is_true(math.abs(loss - logged_loss(log)) <= 1e-12 * loss, said)
      -- with this process's threads (the machine's cores, or what OPENBLAS_NUM_THREADS says)
      -- OpenBLAS may cut a GEMM into other tiles, whose edge kernels round some logits
      -- differently (by an fp32 ulp): the same batches within 1e-6
      said = lwopt(args)
      loss = json.decode(said).val_loss
      assert.is_true(math.abs(loss - logged_loss(log)) <= 1e-6 * loss, said)
   end)

   it("says what is missing, in one line", function()
      local out, status = helpers.sh("luajit " .. recipe .. " --preset tiny --steps 1 --sample 0 "
         .. "--quiet --ckpt-dir " .. dir)
      assert.equal(0, status, out)
      local _, err, st = lwopt("eval " .. dir)
      assert.equal(2, st)
      assert.equal("lwopt: eval needs --data: the text file or token shards whose validation split "
         .. "it takes (lwopt eval --help lists them)\n", err)
      _, err, st = lwopt("eval " .. dir .. " --data '" .. dir .. "/x_train_*.bin'")
      assert.equal(1, st)
      assert.matches("lwopt eval: --data " .. dir .. "/x_train_*.bin is token shards, but the "
         .. "model was trained on bytes of a text file\n", err, 1, true)
      _, err, st = lwopt("eval " .. dir .. "/nothing --data x")
      assert.equal(1, st)
      assert.equal("lwopt eval: " .. dir .. "/nothing does not exist\n", err)
      -- another text than the run's: said, and evaluated
      local text = dir .. "/other.txt"
      local f = assert(io.open(text, "w"))
      f:write(("In the beginning "):rep(200))
      f:close()
      local said
      said, err, st = lwopt("eval " .. dir .. " --data " .. text)
      assert.equal(0, st, err)
      assert.matches("note: the model was trained on kjv.txt (4298239 bytes); --data is other.txt "
         .. "(3400 bytes)\n", err, 1, true)
      assert.matches("^validation loss %d+%.%d+ %(", said)
   end)
end)
