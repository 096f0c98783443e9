-- recipe_schedule_spec.lua: the schedule of recipes/gpt_small.lua across a resume
-- (lua/lwopt/app/recipe_schedule.lua): the plan a checkpoint records is the one the resumed run
-- goes on with, --steps changed or not, unless --reschedule; a flag that contradicts it is
-- refused; one line says the learning rate it resumes at. One rank, tiny preset, a few steps.
local helpers = require("helpers")
local recipe_schedule = require("lwopt.app.recipe_schedule")
local schedule = require("lwopt.schedule")

local root = assert(io.popen("pwd")):read("*l")
local recipe = "cd /tmp && luajit " .. root .. "/recipes/gpt_small.lua --preset tiny --sample 0 "
   .. "--eval-max 1 --quiet "

-- The lr of each step record in a log, by step (a resumed log's later records win).
local function lrs(path)
   local out = {}
   for _, rec in ipairs((helpers.log_records(path))) do out[rec.step] = rec.lr end
   return out
end

-- Cosine from the peak at step w + 1 to 0.1 of it at step n, linear warmup before: the formula.
local function cosine(s, n, w)
   if s <= w then return s / w end
   local x = math.min(1, (s - w - 1) / (n - w - 1))
   return 0.1 + 0.9 * (1 + math.cos(math.pi * x)) / 2
end

describe("the recipe's schedule on resume", function()
   local v = { plan = { kind = "cosine", steps = 12, warmup = 2, min_ratio = 0.1 }, given = {},
      steps = 12 }

   it("goes on with the checkpoint's plan, or one from --steps and --warmup before plans",
      function()
      local saved = { steps = 8, warmup = 2, schedule = { kind = "wsd", steps = 8, warmup = 2,
         min_ratio = 0, decay_steps = 3 } }
      local plan, continued = recipe_schedule.resumed(saved, v, "ck")
      assert.is_true(continued)
      assert.same(saved.schedule, plan)
      plan = recipe_schedule.resumed({ steps = 8, warmup = 2 }, v, "ck")
      assert.same({ kind = "cosine", steps = 8, warmup = 2, min_ratio = 0.1 }, plan)
      -- nothing recorded: the flags' plan
      assert.equal(v.plan, (recipe_schedule.resumed({}, v, "ck")))
      -- --reschedule: the flags' plan
      local again = { plan = v.plan, given = { reschedule = true }, reschedule = true, steps = 12 }
      plan, continued = recipe_schedule.resumed(saved, again, "ck")
      assert.equal(v.plan, plan)
      assert.is_false(continued)
   end)

   it("refuses a shape flag given that contradicts the checkpoint's plan", function()
      local w = { plan = { kind = "linear", steps = 12, warmup = 2, min_ratio = 0.1 },
         given = { schedule = true }, schedule = "linear", steps = 12 }
      local ok, err = pcall(recipe_schedule.resumed, { steps = 8, warmup = 2 }, w, "ck/step-4")
      assert.is_false(ok)
      assert.equal("--resume: --schedule linear, but ck/step-4 was trained on the schedule cosine "
         .. "over 8 steps (warmup 2, down to 0.1 of the peak): a resume goes on with its "
         .. "checkpoint's schedule; add --reschedule to re-plan it from this run's flags", err)
      -- the same value given is no contradiction
      w.plan.kind, w.schedule = "cosine", "cosine"
      assert.is_true((select(2, recipe_schedule.resumed({ steps = 8, warmup = 2 }, w, "ck"))))
   end)

   it("trains a resumed run on the checkpoint's schedule, says its lr, and re-plans on asking",
      function()
      local dir = helpers.fresh_path()
      local log = dir .. ".jsonl"
      local out, status = helpers.sh(recipe .. "--steps 8 --warmup 2 --stop-after 4 --ckpt-dir "
         .. dir)
      assert.equal(0, status, out)
      -- --steps 12: the plan over 8 goes on, and its floor after step 8
      out, status = helpers.sh(recipe .. "--steps 12 --warmup 2 --resume --ckpt-dir " .. dir
         .. " --stop-after 10 --log " .. log)
      assert.equal(0, status, out)
      local line = ("resume: learning rate %.3g at step 5, on the checkpoint's schedule: cosine "
         .. "over 8 steps (warmup 2, down to 0.1 of the peak); --steps 12 trains on past its end "
         .. "at its last rate (--reschedule re-plans it over --steps 12)\n"):format(
         3e-3 * cosine(5, 8, 2))
      assert.matches(line, out, 1, true)
      local got = lrs(log)
      for s = 5, 10 do assert.near(3e-3 * cosine(s, 8, 2), got[s], 1e-12, "step " .. s) end
      -- the checkpoint at step 10 still records the plan over 8: a flag against it is refused
      out, status = helpers.sh(recipe .. "--steps 12 --warmup 3 --resume --ckpt-dir " .. dir)
      assert.equal(1, status)
      assert.matches("--resume: --warmup 3, but " .. dir .. "/step-000000010 was trained on the "
         .. "schedule cosine over 8 steps", out, 1, true)
      -- --reschedule: the plan over 12 with warmup 3, from step 11
      out, status = helpers.sh(recipe .. "--steps 12 --warmup 3 --resume --reschedule --ckpt-dir "
         .. dir .. " --log " .. log)
      assert.equal(0, status, out)
      assert.matches(("resume: learning rate %.3g at step 11, on the schedule --reschedule "
         .. "re-planned: cosine over 12 steps (warmup 3, down to 0.1 of the peak)\n"):format(
         3e-3 * cosine(11, 12, 3)), out, 1, true)
      got = lrs(log)
      for s = 11, 12 do assert.near(3e-3 * cosine(s, 12, 3), got[s], 1e-12, "step " .. s) end
      helpers.sh("rm -rf " .. dir .. " " .. dir .. ".*")
   end)

   it("keeps a wsd schedule's shape across a resume given no schedule flags", function()
      local dir = helpers.fresh_path()
      local log = dir .. ".jsonl"
      local out, status = helpers.sh(recipe .. "--steps 8 --warmup 1 --schedule wsd "
         .. "--decay-steps 3 --min-lr-ratio 0 --stop-after 5 --ckpt-dir " .. dir)
      assert.equal(0, status, out)
      out, status = helpers.sh(recipe .. "--steps 8 --resume --ckpt-dir " .. dir .. " --log "
         .. log .. " 2>&1")
      assert.equal(0, status, out)
      -- the preset's --warmup 10 is not a change: the plan's warmup is the one the run has
      assert.matches("on the checkpoint's schedule: wsd over 8 steps (warmup 1, decay over the "
         .. "last 3, down to 0 of the peak)\nfinal validation loss", out, 1, true)
      assert.is_nil(out:find("--warmup", 1, true), out)
      local plan = { kind = "wsd", steps = 8, warmup = 1, min_ratio = 0, decay_steps = 3 }
      local config = select(2, helpers.log_records(log))[1]
      assert.same({ 1, "wsd", 3, 0 }, { config.flags.warmup, config.flags.schedule,
         config.flags["decay-steps"], config.flags["min-lr-ratio"] })
      assert.same(plan, { kind = config.schedule.kind, steps = config.schedule.steps,
         warmup = config.schedule.warmup, min_ratio = config.schedule.min_ratio,
         decay_steps = config.schedule.decay_steps })
      local got = lrs(log)
      -- stable to step 5, then 2/3, 1/3 and 0 of the peak
      for s, want in pairs({ [6] = 2 / 3, [7] = 1 / 3, [8] = 0 }) do
         assert.near(3e-3 * want, got[s], 1e-12, "step " .. s)
         assert.near(want, schedule.multiplier(plan, s), 1e-12)
      end
      helpers.sh("rm -rf " .. dir .. " " .. dir .. ".*")
   end)
end)
