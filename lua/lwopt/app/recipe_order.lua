-- recipe_order.lua: --data-order of recipes/gpt_small.lua (beside recipe.lua). sequential sets
-- the dataset's order (lwopt.data_order) once the run's first step and global batch are known
-- (after --resume, which may change --accum), starting where the checkpoint resumed left off,
-- and says where it reads from; random is the dataset's own draw and needs nothing here.
local data_order = require("lwopt.data_order")
local recipe_batch = require("lwopt.app.recipe_batch")

local recipe_order = {}

-- The run's first sequence: 0, or after a resume the checkpoint's position (ck.resumed_position,
-- recipe_resume), with a note when the checkpoint has none (it read random windows, or its
-- recipe kept no position) and the data is read from its start.
local function start_of(run, per_epoch)
   if not run.start_step then return 0, nil end
   local ck = run.checkpoint
   local start = data_order.resumed_index(ck and ck.resumed_position, per_epoch)
   if start then return start, nil end
   return 0, ("resume: %s keeps no position in sequential data (it read random windows): "
      .. "reading from the data's start"):format(ck and ck.resumed_from or "the checkpoint")
end

-- With --data-order sequential: the dataset read in order from the run's first sequence, and a
-- line saying where (unless --quiet; a resume that cannot continue the position always says
-- so). The same on every rank (each computes it from the same flags and manifest).
function recipe_order.setup(run, v, data, say)
   if v.data_order ~= "sequential" then return end
   local dp = (run.dp_comm or run.comm).size
   local global = recipe_batch.global(v, dp)
   local per_epoch = data_order.per_epoch(data.n_train, v.seq)
   local start, note = start_of(run, per_epoch)
   local first = run.start_step or 1
   local order = data_order.sequential(data, { seq_len = v.seq, global_batch = global,
      start_step = first, start = start })
   data:set_order(order)
   if note then say(note) end
   if v.quiet then return end
   local unit = data.kind == "tokens" and "token" or "byte"
   say(("data: read in order, an epoch is %d sequences of %d %ss (%.1f steps of %d); step %d "
      .. "reads from %s"):format(per_epoch, v.seq, unit, per_epoch / global, global, first,
      data_order.position_text(order:position(order:index(first, 0)), unit)))
end

return recipe_order
