-- schedule_spec.lua: lw.schedule's plans against the formulas written out here, step by step, in
-- doubles: warmup, then cosine, linear, constant or warmup-stable-decay; past the plan's end the
-- last value; and plans that cannot be followed refused by name.
local schedule = require("lwopt.schedule")
local train = require("lwopt.train")

-- The multiplier at step s as each schedule's definition states it (1-based steps; the warmup
-- reaches the peak at its last step, the decay reaches the floor at the plan's last step).
local function expected(plan, s)
   local w, n, r = plan.warmup, plan.steps, plan.min_ratio
   if s <= w then return s / w end
   if plan.kind == "constant" then return 1 end
   if plan.kind == "wsd" then
      local d = plan.decay_steps
      if s <= n - d then return 1 end
      local done = math.min(s - (n - d), d) / d
      return 1 + (r - 1) * done
   end
   -- steps w + 1 .. n map onto 0 .. 1
   local x = math.min(1, math.max(0, (s - (w + 1)) / (n - (w + 1))))
   if plan.kind == "linear" then return 1 + (r - 1) * x end
   return r + (1 - r) * (math.cos(math.pi * x) + 1) / 2
end

describe("lw.schedule", function()
   local plans = {
      { kind = "cosine", steps = 101, warmup = 10, min_ratio = 0.1 },
      { kind = "linear", steps = 101, warmup = 10, min_ratio = 0.25 },
      { kind = "constant", steps = 101, warmup = 10 },
      { kind = "wsd", steps = 101, warmup = 10, min_ratio = 0, decay_steps = 20 },
   }

   it("follows each kind's formula at every step, and stays at its last value past its end",
      function()
      for _, plan in ipairs(plans) do
         schedule.check(plan)
         for s = 1, 130 do
            assert.near(expected(plan, s), schedule.multiplier(plan, s), 1e-12,
               ("%s at step %d"):format(plan.kind, s))
         end
      end
   end)

   it("has the values the definitions give at chosen steps", function()
      local cos, lin, const, wsd = plans[1], plans[2], plans[3], plans[4]
      -- warmup: step 5 of 10 is half the peak, step 10 the peak
      for _, plan in ipairs(plans) do
         assert.equal(0.5, schedule.multiplier(plan, 5))
         assert.equal(1, schedule.multiplier(plan, 10))
      end
      -- cosine and linear: the peak at step 11, halfway down at 56, the floor at 101
      assert.equal(1, schedule.multiplier(cos, 11))
      assert.near(0.55, schedule.multiplier(cos, 56), 1e-12)
      assert.near(0.1, schedule.multiplier(cos, 101), 1e-12)
      assert.near(0.625, schedule.multiplier(lin, 56), 1e-12)
      assert.near(0.25, schedule.multiplier(lin, 101), 1e-12)
      assert.equal(1, schedule.multiplier(const, 101))
      -- wsd: stable through step 81, then 20 steps down to 0 at step 101
      assert.equal(1, schedule.multiplier(wsd, 81))
      assert.near(0.95, schedule.multiplier(wsd, 82), 1e-12)
      assert.near(0.5, schedule.multiplier(wsd, 91), 1e-12)
      assert.equal(0, schedule.multiplier(wsd, 101))
      assert.equal(0, schedule.multiplier(wsd, 150))
   end)

   it("is lw.train.schedule's cosine, which it replaces", function()
      for s = 1, 101 do
         assert.equal(train.schedule(s, 101, 10, 0.1), schedule.multiplier(plans[1], s))
      end
      local none = { kind = "linear", steps = 1, warmup = 0, min_ratio = 0.1 }
      assert.equal(1, schedule.multiplier(none, 1))
   end)

   it("refuses a plan it cannot follow, naming the field", function()
      local function refuses(plan, message)
         local ok, err = pcall(schedule.check, plan)
         assert.is_false(ok)
         assert.matches(message, err, 1, true)
      end
      refuses({ kind = "step", steps = 10, warmup = 0, min_ratio = 0 },
         "lw.schedule: unknown schedule kind 'step' (cosine, linear, constant, wsd)")
      refuses({ kind = "cosine", steps = 0, warmup = 0, min_ratio = 0 },
         "steps must be a whole number >= 1, got 0")
      refuses({ kind = "cosine", steps = 10, warmup = 1.5, min_ratio = 0 },
         "warmup must be a whole number >= 0, got 1.5")
      refuses({ kind = "linear", steps = 10, warmup = 0, min_ratio = 2 },
         "min_ratio must be between 0 and 1, got 2")
      refuses({ kind = "wsd", steps = 10, warmup = 4, min_ratio = 0, decay_steps = 7 },
         "decay_steps must be a whole number between 1 and steps - warmup (6), got 7")
   end)

   it("says a plan in a few words", function()
      assert.equal("wsd over 101 steps (warmup 10, decay over the last 20, down to 0 of the peak)",
         schedule.text(plans[4]))
      assert.equal("constant over 101 steps (warmup 10)", schedule.text(plans[3]))
   end)
end)
