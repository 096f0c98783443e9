-- recipe_schedule.lua: the learning-rate schedule of recipes/gpt_small.lua (beside recipe.lua):
-- the plan (lw.schedule) its flags make (--schedule, --warmup, --min-lr or --min-lr-ratio,
-- --decay-steps or --decay-fraction), the plan a resumed run follows (its checkpoint's, unless
-- --reschedule), the line that says where a resume picks it up, and the warning for a warmup
-- longer than the run.
local schedule = require("lwopt.schedule")
local errors = require("lwopt.errors")

local recipe_schedule = {}

local fail = errors.failer(nil)

-- nanochat's warmdown ratio: the share of the run a wsd schedule decays over by default.
recipe_schedule.DECAY_FRACTION = 0.2
-- The default floor of the decaying schedules, a share of each group's peak.
recipe_schedule.MIN_RATIO = 0.1

-- Two values that give one setting agree when they differ by rounding only.
local function agree(a, b) return math.abs(a - b) <= 1e-9 * math.max(math.abs(a), math.abs(b)) end

-- The floor as a share of the peak: --min-lr-ratio, or --min-lr over --lr (Muon's peak, or
-- AdamW's with --optimizer adamw: peak), or the default; both flags must agree.
local function min_ratio(v, peak, peak_flag)
   local ratio = v.min_lr_ratio
   if v.min_lr then
      if v.min_lr > peak then
         fail("--min-lr %g is above the peak learning rate (%s %g)", v.min_lr, peak_flag, peak)
      end
      local from_lr = v.min_lr / peak
      if ratio and not agree(ratio, from_lr) then
         fail("--min-lr %g is %.6g of %s %g, but --min-lr-ratio is %g: give one of the two",
            v.min_lr, from_lr, peak_flag, peak, ratio)
      end
      ratio = from_lr
   end
   return ratio or recipe_schedule.MIN_RATIO
end

-- wsd's decay steps: --decay-steps, or --decay-fraction (default DECAY_FRACTION) of --steps;
-- both must agree, and the decay must fit after the warmup.
local function decay_steps(v)
   local d = v.decay_steps
   if v.decay_fraction then
      local from_fraction = math.max(1, math.floor(v.decay_fraction * v.steps + 0.5))
      if d and d ~= from_fraction then
         fail("--decay-steps %d, but --decay-fraction %g of --steps %d is %d: give one of the two",
            d, v.decay_fraction, v.steps, from_fraction)
      end
      d = from_fraction
   end
   d = d or math.max(1, math.floor(recipe_schedule.DECAY_FRACTION * v.steps + 0.5))
   if d > v.steps - v.warmup then
      fail("--schedule wsd decays over %d steps, more than the %d after the warmup (--steps %d - "
         .. "--warmup %d): lower --decay-steps or --warmup, or raise --steps", d,
         math.max(0, v.steps - v.warmup), v.steps, v.warmup)
   end
   return d
end

-- Checks the schedule's flags (v: the flags, --steps, --warmup and the peaks filled in) and
-- sets v.plan, the plan they make; v.min_lr_ratio and v.decay_steps become the plan's values
-- (nil where its kind has none). peak, peak_flag: the learning rate the step records show.
function recipe_schedule.check_flags(v, peak, peak_flag)
   v.schedule = v.schedule or "cosine"
   if v.schedule == "constant" and (v.min_lr or v.min_lr_ratio) then
      fail("--%s: --schedule constant does not decay (cosine, linear or wsd do)",
         v.min_lr and "min-lr" or "min-lr-ratio")
   end
   if v.schedule ~= "wsd" and (v.decay_steps or v.decay_fraction) then
      fail("--%s is for --schedule wsd (warmup-stable-decay), not %s",
         v.decay_steps and "decay-steps" or "decay-fraction", v.schedule)
   end
   if v.reschedule and not v.resume then
      fail("--reschedule re-plans a resumed run's schedule: add --resume (with --ckpt-dir)")
   end
   v.min_lr_ratio = v.schedule ~= "constant" and min_ratio(v, peak, peak_flag) or nil
   v.decay_steps = v.schedule == "wsd" and decay_steps(v) or nil
   v.plan = schedule.check({ kind = v.schedule, steps = v.steps, warmup = v.warmup,
      min_ratio = v.min_lr_ratio, decay_steps = v.decay_steps })
end

-- The flags that shape a plan, and its field each sets.
local SHAPE = { { "schedule", "kind" }, { "warmup", "warmup" }, { "min_lr_ratio", "min_ratio" },
   { "min_lr", "min_ratio" }, { "decay_steps", "decay_steps" },
   { "decay_fraction", "decay_steps" } }

local function copy(t)
   local out = {}
   for k, x in pairs(t) do out[k] = x end
   return out
end

-- The plan a run that resumes a checkpoint (saved: its settings; path, for messages) follows,
-- and whether it is the checkpoint's: with --reschedule the flags' (v.plan), else the one the
-- checkpoint records (one saved before plans were recorded: its --steps and --warmup, cosine
-- down to 0.1). A shape flag given (v.given) that contradicts the saved plan is refused: the
-- run would not follow it.
function recipe_schedule.resumed(saved, v, path)
   if v.reschedule then return v.plan, false end
   local was = saved.schedule
   if type(was) ~= "table" then
      if saved.steps == nil or saved.warmup == nil then return v.plan, false end
      was = { kind = "cosine", steps = saved.steps, warmup = saved.warmup,
         min_ratio = recipe_schedule.MIN_RATIO }
   end
   was = schedule.check(copy(was))
   for _, s in ipairs(SHAPE) do
      local flag, field = s[1], s[2]
      local now, then_ = v.plan[field], was[field]
      local differs = now ~= then_ and not (type(now) == "number" and type(then_) == "number"
         and agree(now, then_))
      if v.given[flag] and differs then
         errors.fail("--resume", "--%s %s, but %s was trained on the schedule %s: a resume goes "
            .. "on with its checkpoint's schedule; add --reschedule to re-plan it from this "
            .. "run's flags", (flag:gsub("_", "-")), tostring(v[flag]), path, schedule.text(was))
      end
   end
   return was, true
end

-- v's schedule flags made those of plan (the one a resumed run follows), so that the log's
-- record says the schedule the run is on.
function recipe_schedule.follow(v, plan)
   v.plan, v.schedule, v.warmup = plan, plan.kind, plan.warmup
   v.min_lr_ratio, v.decay_steps = plan.min_ratio, plan.decay_steps
end

-- The line a resumed run says: the learning rate (peak: the step records' peak) at its first
-- step and the schedule it follows.
function recipe_schedule.resume_line(plan, continued, step, v, peak)
   local lr = schedule.multiplier(plan, step) * peak
   if not continued then
      return ("resume: learning rate %.3g at step %d, on the schedule --reschedule re-planned: "
         .. "%s"):format(lr, step, schedule.text(plan))
   end
   local past = ""
   if plan.steps ~= v.steps then
      past = ("; --steps %d %s (--reschedule re-plans it over --steps %d)"):format(v.steps,
         v.steps > plan.steps and "trains on past its end at its last rate" or "ends it early",
         v.steps)
   end
   return ("resume: learning rate %.3g at step %d, on the checkpoint's schedule: %s%s")
      :format(lr, step, schedule.text(plan), past)
end

-- A schedule whose warmup outlasts the run never reaches its peak learning rate: said on
-- stderr, even with --quiet, since every step of the run trains slower than the flags suggest.
function recipe_schedule.warn(v, peak, say)
   if v.plan.warmup <= v.plan.steps then return end
   local function given(k, value)
      return ("--%s %s%s"):format(k, value, v.from_preset[k] and (" (--preset %s's)"):format(
         v.preset) or "")
   end
   local last = schedule.multiplier(v.plan, v.steps) * peak
   say(("warning: %s is longer than the run (%s): the learning rate stops at %.3g, short of its "
      .. "peak %g (lower --warmup or raise --steps)"):format(given("warmup", v.warmup),
      given("steps", v.steps), last, peak), io.stderr)
end

return recipe_schedule
