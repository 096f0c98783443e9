-- cli_eval.lua: `lwopt eval`: the validation loss of a trained model (a checkpoint or a bare
-- .safetensors file, lwopt.trained) over a data set's validation split, computed by the training
-- loop's own evaluation (lw.train.evaluate) with the run's sequences per batch and count: for the
-- data the run trained on it is the final validation loss the run reported.
local trained = require("lwopt.trained")
local cli_trained = require("lwopt.app.cli_trained")

local cli_eval = {}

local USAGE = [[
usage: lwopt eval CHECKPOINT|FILE.safetensors --data PATH [flags]
  CHECKPOINT: a step-N directory, or a --ckpt-dir (the checkpoint its latest file names). The
  validation split of --data is the recipe's: a text file's last 5%; token shards' --val-data,
  else the shards their name implies (train -> val), else their last 5%.]]

local function flag_list()
   local list = {
      { "data", "string", nil, "text file, or token shards (a .bin path or a pattern), as the "
        .. "recipe's --data" },
      { "val-data", "string", nil, "validation token shards, as the recipe's --val-data" },
      { "eval-max", "int", nil, "validation sequences (all: the whole split; default: the "
        .. "run's --eval-max; " .. trained.DEFAULTS.eval_max .. " for a bare file)", min = 1,
        words = { all = "all" } },
      { "batch", "int", nil, "sequences per forward pass (default: the run's --batch; "
        .. trained.DEFAULTS.batch .. " for a bare file)", min = 1, max = 1e6 },
      { "json", "bool", false, "print one JSON object (the loss in full precision)" },
   }
   for _, f in ipairs(cli_trained.flags) do list[#list + 1] = f end
   list[#list + 1] = { "help", "bool", false, "this text" }
   return list
end

local function evaluate(v, path, job)
   local ffi = require("ffi")
   local json = require("lwopt.json")
   local train = require("lwopt.train")
   local t = cli_trained.open(v, path, job)
   local s = t.settings
   local data = trained.open_data(v.data, s, v.val_data)
   local name = require("lwopt.app.recipe").data_name(data)
   if s.data and s.data ~= name then
      job.note(("the model was trained on %s; --data is %s"):format(s.data, name))
   end
   local batch, max = v.batch or s.batch, v.eval_max or s.eval_max
   local run = { model = t.model, ddp = t.ddp, comm = t.comm, data = data, batch = batch,
                 seq = s.seq, tokens = ffi.new("int32_t[?]", batch * s.seq),
                 targets = ffi.new("int32_t[?]", batch * s.seq) }
   local loss, count = train.evaluate(run, max)
   local unit = data.kind == "tokens" and "token" or "byte"
   if v.json then
      job.say(json.encode(json.object({ val_loss = loss, bits_per_unit = loss / math.log(2),
         unit = unit, sequences = count, seq = s.seq, batch = batch, path = t.path,
         step = t.step })))
   else
      job.say(("validation loss %.4f (%.3f bits/%s; %d sequences of %d %ss)"):format(loss,
         loss / math.log(2), unit, count, s.seq, unit))
   end
end

-- lwopt eval PATH --data DATA [flags]: the exit status.
function cli_eval.main(argv, out, err)
   return cli_trained.main({ name = "eval", usage = USAGE, flags = flag_list(), work = evaluate,
      check = function(v)
         if v.data == nil then
            return "eval needs --data: the text file or token shards whose validation split it "
               .. "takes"
         end
      end }, argv, out, err)
end

return cli_eval
