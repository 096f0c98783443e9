-- schedule.lua: learning-rate schedules as plain data, a plan = { kind, steps, warmup, min_ratio,
-- decay_steps }, and the multiplier of the peak learning rate at each step. A plan is what a
-- checkpoint records, so that a resumed run goes on with the schedule it was on. Choosing a
-- plan from flags and resuming one is the recipe's (app/recipe_schedule.lua).
local errors = require("lwopt.errors")

local schedule = {}

local fail = errors.failer("lw.schedule")

-- The shapes after the warmup: cosine (from 1 down to min_ratio at the last step), linear (the
-- same ends, a straight line), constant (1 to the end), wsd (warmup-stable-decay: 1 until the
-- last decay_steps steps, then a straight line down to min_ratio at the last step).
schedule.KINDS = { "cosine", "linear", "constant", "wsd" }

local KNOWN = {}
for _, k in ipairs(schedule.KINDS) do KNOWN[k] = true end

local function whole(x) return type(x) == "number" and x == math.floor(x) end

-- plan itself when it can be followed, else an error naming the field and its value.
function schedule.check(plan)
   if type(plan) ~= "table" then fail("a schedule must be a table, got %s", type(plan)) end
   if not KNOWN[plan.kind] then
      fail("unknown schedule kind '%s' (%s)", tostring(plan.kind),
         table.concat(schedule.KINDS, ", "))
   end
   if not whole(plan.steps) or plan.steps < 1 then
      fail("steps must be a whole number >= 1, got %s", tostring(plan.steps))
   end
   if not whole(plan.warmup) or plan.warmup < 0 then
      fail("warmup must be a whole number >= 0, got %s", tostring(plan.warmup))
   end
   if plan.kind ~= "constant" then
      local r = plan.min_ratio
      if type(r) ~= "number" or not (r >= 0 and r <= 1) then
         fail("min_ratio must be between 0 and 1, got %s", tostring(r))
      end
   end
   if plan.kind == "wsd" then
      local d = plan.decay_steps
      if not whole(d) or d < 1 or d > plan.steps - plan.warmup then
         fail("decay_steps must be a whole number between 1 and steps - warmup (%d), got %s",
            plan.steps - plan.warmup, tostring(d))
      end
   end
   return plan
end

-- The multiplier of the peak learning rate at step s (1-based) of a checked plan: a linear
-- warmup s / warmup over the first `warmup` steps, then the plan's shape. Past the plan's last
-- step (a run trained on beyond it) the multiplier stays at its last value.
function schedule.multiplier(plan, s)
   local warmup, steps = plan.warmup, plan.steps
   if warmup > 0 and s <= warmup then return s / warmup end
   if plan.kind == "constant" then return 1 end
   local low = plan.min_ratio
   if plan.kind == "wsd" then
      local stable_end = steps - plan.decay_steps
      if s <= stable_end then return 1 end
      local progress = math.min(1, (s - stable_end) / plan.decay_steps)
      return 1 - (1 - low) * progress
   end
   -- the first step after warmup is at the peak, the plan's last at the minimum
   local span = math.max(1, steps - warmup - 1)
   local progress = math.max(0, math.min(1, (s - warmup - 1) / span))
   if plan.kind == "linear" then return 1 - (1 - low) * progress end
   return low + (1 - low) * 0.5 * (1 + math.cos(math.pi * progress))
end

-- The plan in a few words: "cosine over 500 steps (warmup 50, down to 0.1 of the peak)".
function schedule.text(plan)
   local parts = { ("warmup %d"):format(plan.warmup) }
   if plan.kind == "wsd" then parts[#parts + 1] = ("decay over the last %d"):format(
      plan.decay_steps) end
   if plan.kind ~= "constant" then
      parts[#parts + 1] = ("down to %.4g of the peak"):format(plan.min_ratio)
   end
   return ("%s over %d steps (%s)"):format(plan.kind, plan.steps, table.concat(parts, ", "))
end

return schedule
