-- recipe_batch.lua: the global batch of recipes/gpt_small.lua (beside recipe.lua): the
-- sequences of one optimizer step over every data-parallel rank, --batch x --accum x the ranks
-- (/ --tp, whose ranks share their sequences). --global-batch states it, as Megatron's
-- --global-batch-size does, and --accum follows; a resume at another rank count keeps the
-- checkpoint's by changing --accum (the step's sequences are the same however they are split),
-- or refuses when no whole --accum can.
local errors = require("lwopt.errors")

local batch = {}

-- "1 rank", "2 ranks", "2 data-parallel ranks (tp 2)".
local function ranks_text(dp, v)
   local text = ("%d %srank%s"):format(dp, v.tp > 1 and "data-parallel " or "",
      dp == 1 and "" or "s")
   return v.tp > 1 and ("%s (tp %d)"):format(text, v.tp) or text
end

-- Sets v.accum for dp data-parallel ranks: from --global-batch when given, else --accum, else
-- 1; v.accum_given says whether the user fixed it. Returns a usage error's message when
-- --global-batch does not split into --batch x the ranks x a whole --accum, or disagrees with
-- --accum; nil when all is well.
function batch.plan(v, dp)
   v.accum_given = v.accum ~= nil or v.global_batch ~= nil
   if v.global_batch == nil then
      v.accum = v.accum or 1
      return nil
   end
   local per = v.batch * dp
   if v.global_batch % per ~= 0 then
      return ("--global-batch %d is not a multiple of --batch %d x %s (%d): a step's sequences "
         .. "split evenly over the ranks and micro-steps"):format(v.global_batch, v.batch,
         ranks_text(dp, v), per)
   end
   local accum = v.global_batch / per
   if v.accum and v.accum ~= accum then
      return ("--global-batch %d with --batch %d on %s is --accum %d, not --accum %d (give one "
         .. "of the two)"):format(v.global_batch, v.batch, ranks_text(dp, v), accum, v.accum)
   end
   v.accum = accum
   return nil
end

-- The global batch this run trains with (v.accum set by batch.plan).
function batch.global(v, dp) return v.batch * v.accum * dp end

-- The global batch a checkpoint's settings (its manifest's extra) record; nil when they do not
-- say (a checkpoint of lw.checkpoint.save without the recipe).
function batch.saved(saved)
   if saved.global_batch then return saved.global_batch end
   if saved.batch and saved.accum and saved.ranks then
      return saved.batch * saved.accum * saved.ranks / (saved.tp or 1)
   end
   return nil
end

-- Resuming the checkpoint at path (saved: its settings) on dp data-parallel ranks: the --accum
-- that keeps its global batch, and the line that says so (nil when --accum stays as it is: it
-- already keeps it, or the user fixed it with --accum or --global-batch). Raises when no whole
-- --accum keeps it with this --batch and rank count.
function batch.keep(saved, v, dp, path)
   local was = batch.saved(saved)
   if was == nil or v.accum_given then return v.accum, nil end
   local per = v.batch * dp
   if was == per * v.accum then return v.accum, nil end
   if was % per ~= 0 then
      errors.fail("--resume", "%s was trained with a global batch of %d sequences, which --batch "
         .. "%d on %s cannot keep (%d is not a multiple of %d): give --batch and --accum that make "
         .. "it, or a new one with --global-batch", path, was, v.batch, ranks_text(dp, v), was,
         per)
   end
   local accum = was / per
   return accum, ("--accum %d (was %s) keeps the checkpoint's global batch of %d sequences at %s")
      :format(accum, tostring(saved.accum or v.accum), was, ranks_text(dp, v))
end

return batch
