-- recipe_eval_spec.lua: evaluation in recipes/gpt_small.lua: --keep-best (every validation loss
-- below the ones before is checkpointed and --ckpt-dir's `best` names it, whatever --keep
-- prunes; a resumed run must beat the best before it) and --sample-every (samples during
-- training in the log, the training unchanged). One rank, tiny preset, a few steps.
local helpers = require("helpers")
local json = require("lwopt.json")
local checkpoint = require("lwopt.checkpoint")

local root = assert(io.popen("pwd")):read("*l")
local recipe = "cd /tmp && luajit " .. root .. "/recipes/gpt_small.lua --preset tiny --sample 0 "
   .. "--eval-max 4 --eval-every 2 --warmup 1 --quiet "

-- The lowest val_loss of the logs' step records, and its step.
local function lowest(paths)
   local best, at = math.huge, nil
   for _, path in ipairs(paths) do
      for _, rec in ipairs((helpers.log_records(path))) do
         if rec.val_loss and rec.val_loss < best then best, at = rec.val_loss, rec.step end
      end
   end
   return best, at
end

describe("--keep-best", function()
   it("keeps the checkpoint of the lowest validation loss, across --keep and a resume", function()
      local dir = helpers.fresh_path()
      local out, status = helpers.sh(recipe .. "--steps 6 --lr 0.05 --keep 1 --keep-best "
         .. "--ckpt-dir " .. dir .. " --log " .. dir .. ".a.jsonl")
      assert.equal(0, status, out)
      local loss, step = lowest({ dir .. ".a.jsonl" })
      local best = checkpoint.best(dir)
      assert.equal(("%s/step-%09d"):format(dir, step), best)
      local m = checkpoint.read_manifest(best, { files = false })
      assert.equal(loss, m.extra.val_loss)
      assert.equal(4, m.extra.val_sequences)
      local line = ("best validation loss %.4f at step %d: %s (%s/best names it)"):format(loss,
         step, best, dir)
      assert.matches(line, out, 1, true)
      -- resumed at a learning rate that makes the loss worse: the evaluation at step 8 is above
      -- the best before the resume, so the best stays, kept though --keep 1
      out, status = helpers.sh(recipe .. "--steps 8 --lr 5 --keep 1 --keep-best --resume "
         .. "--ckpt-dir " .. dir .. " --log " .. dir .. ".b.jsonl")
      assert.equal(0, status, out)
      local after = lowest({ dir .. ".b.jsonl" })
      assert.is_true(after > loss, "the resumed run's loss did not rise: " .. after)
      assert.equal(best, checkpoint.best(dir))
      assert.matches(line, out, 1, true)
      assert.equal(dir .. "/step-000000008", checkpoint.latest(dir))
      assert.equal("best latest step-000000006 step-000000008 ",
         (helpers.sh("ls " .. dir):gsub("\n", " ")))
      -- --keep-best needs somewhere to keep it
      out, status = helpers.sh(recipe .. "--steps 2 --keep-best")
      assert.equal(1, status)
      assert.matches("--keep-best needs --ckpt-dir", out, 1, true)
      helpers.sh("rm -rf " .. dir .. " " .. dir .. ".*")
   end)

   it("writes a sample into the log every --sample-every steps, and trains the same", function()
      local log = os.tmpname()
      local loud = recipe:gsub("%-%-quiet ", "")
      local out, status = helpers.sh(loud .. "--steps 4 --sample 12 --sample-every 2 --log "
         .. log .. ".a.jsonl --progress lines")
      assert.equal(0, status, out)
      local sampled = helpers.log_records(log .. ".a.jsonl")
      assert.is_nil(sampled[1].sample)
      for _, s in ipairs({ 2, 4 }) do
         assert.matches("^sample:\nAnd God said" .. ("."):rep(12) .. "$", sampled[s].sample)
         assert.matches("step     " .. s .. "/4[^\n]*\n" .. sampled[s].sample:gsub("%p", "%%%0"),
            out)
      end
      out, status = helpers.sh(recipe .. "--steps 4 --sample 12 --log " .. log .. ".b.jsonl")
      assert.equal(0, status, out)
      local plain = helpers.log_records(log .. ".b.jsonl")
      for s = 1, 4 do
         assert.equal(plain[s].loss, sampled[s].loss)
         assert.is_nil(plain[s].sample)
      end
      helpers.sh("rm -f " .. log .. "*")
   end)

   it("ends with the next commands for its checkpoint, which run as printed", function()
      local dir = helpers.fresh_path()
      local cmd = "luajit " .. root .. "/recipes/gpt_small.lua --preset tiny --sample 0 "
         .. "--eval-max 2 --steps 2 --ckpt-dir '" .. dir .. " x'"
      local out, status = helpers.sh("cd /tmp && " .. cmd)
      assert.equal(0, status, out)
      local next_lines = out:match("next, from the checkpoint in [^\n]*\n(.*)$")
      assert.is_not_nil(next_lines, out)
      local ran = 0
      for line in next_lines:gmatch("[^\n]+") do
         local command = line:match("^  (.-)   #")
         assert.is_not_nil(command, line)
         if command:match("^the same command") then
            command = cmd .. " " .. command:gsub("^the same command with ", "")
         end
         local said, st = helpers.sh("cd /tmp && " .. command)
         assert.equal(0, st, command .. "\n" .. said)
         ran = ran + 1
      end
      assert.equal(4, ran)
      assert.matches("'" .. dir .. " x%-hf'", next_lines)
      helpers.sh("rm -rf '" .. dir .. " x' '" .. dir .. " x-hf'")
   end)
end)
