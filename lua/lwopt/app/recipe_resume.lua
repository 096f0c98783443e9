-- recipe_resume.lua: the recipe's checkpoint settings and --resume: what a checkpoint records
-- for a run (and --save-params for its model), the comparison that refuses a checkpoint of
-- another model and notes what changed, and loading it. Saving checkpoints is lwopt.train's.
local checkpoint = require("lwopt.checkpoint")
local files = require("lwopt.files")
local errors = require("lwopt.errors")
local sampling = require("lwopt.sampling")
local recipe_batch = require("lwopt.app.recipe_batch")
local recipe_schedule = require("lwopt.app.recipe_schedule")

local recipe_resume = {}

-- The data in a few words: "kjv.txt (4298239 bytes)", "fineweb_train_*.bin (1073741824 tokens)".
function recipe_resume.data_name(data)
   return ("%s (%d %s)"):format(data.path:match("([^/]*)$"), data.n, data.kind == "tokens"
      and "tokens" or "bytes")
end

-- The settings a checkpoint records (manifest extra) for this run's flags.
-- The dense MLP's hidden width: the model's (its config's default when no flag gave one).
local function hidden(v)
   return v.model_config and v.model_config.mlp_hidden or v.mlp_hidden or 4 * v.n_embd
end

-- The models file that registered the model (lw.models.load's record), or nil for the
-- library's: kept as a hint for the commands that open the checkpoint, never run by them.
local function models_file(v)
   return require("lwopt.models").get(v.arch).file
end

local function settings(v, comm, data)
   -- shape_from: the --init-from file whose shape the model took (recipe_init.lua), or nil
   return { preset = v.preset, shape_from = v.shape_from, n_layer = v.n_layer,
            n_embd = v.n_embd, n_head = v.n_head,
            seq = v.seq, batch = v.batch, accum = v.accum, seed = v.seed, lr = v.lr,
            adamw_lr = v.adamw_lr, embedding_lr = v.embedding_lr, scalar_lr = v.scalar_lr,
            weight_decay = v.weight_decay, schedule = v.plan,
            warmup = v.warmup, steps = v.steps, optimizer = v.optimizer, zero = v.zero,
            shard = v.shard, mode = v.mode, layout = v.layout, clip = v.clip,
            data = recipe_resume.data_name(data), data_kind = v.data_kind, vocab = v.vocab,
            data_order = v.data_order,
            ranks = comm.size, global_batch = recipe_batch.global(v, comm.size / v.tp),
            n_expert = v.n_expert, shared_expert = v.shared_expert,
            topk = v.topk, aux_coef = v.aux_coef, ep = v.ep, tp = v.tp,
            muon_tp_mode = v.muon_tp_mode, split_qkv = v.split_qkv,
            mlp_hidden = v.n_expert == 0 and hidden(v) or nil,
            -- the model (lw.models) and its whole config, which sample and eval build again
            arch = v.arch, model = v.model_config, models_file = models_file(v),
            rope_pairing = v.model_config and v.model_config.rope_pairing,
            -- what `lwopt eval` and `lwopt sample` repeat: the validation sequences, and the
            -- bytes the sample draws among
            eval_max = v.eval_max,
            bytes_seen = data.kind ~= "tokens" and sampling.bytes_mask(sampling.bytes_seen(data))
               or nil }
end

-- The model's settings, which --save-params records in its file's metadata (weights.SETTINGS_KEY)
-- so that `lwopt export` knows its heads and vocabulary without a checkpoint; a resume cannot
-- change them, so a resumed run writes the same bytes as an uninterrupted one.
local function model_settings(v)
   return { n_layer = v.n_layer, n_embd = v.n_embd, n_head = v.n_head, seq = v.seq,
            data_kind = v.data_kind, vocab = v.vocab, n_expert = v.n_expert,
            shared_expert = v.shared_expert, arch = v.arch, model = v.model_config,
            models_file = models_file(v),
            rope_pairing = v.model_config and v.model_config.rope_pairing,
            mlp_hidden = v.n_expert == 0 and hidden(v) or nil }
end

-- Settings that change the model's shape or its optimizer state, or what its tokens mean: a
-- checkpoint made with other values cannot continue this run.
local BREAKING = {
   { "arch", "--arch" }, { "rope_pairing", "--rope-pairing" }, { "data_kind", "--data" },
   { "vocab", "--vocab" },
   { "n_layer", "--preset" }, { "n_embd", "--preset" }, { "n_head", "--preset" },
   { "seq", "--seq" }, { "optimizer", "--optimizer" }, { "n_expert", "--n-expert" },
   { "shared_expert", "--shared-expert" }, { "mlp_hidden", "--mlp-hidden" },
}
-- What a checkpoint that does not record a setting was trained with (those before token data
-- were all byte-level).
local BEFORE = { data_kind = "bytes", vocab = 256, n_expert = 0, shared_expert = false,
   arch = "gpt", rope_pairing = "halves" }
local KIND_WORDS = { bytes = "bytes of a text file", tokens = "token shards" }
-- Breaking settings' changes a resume may make all the same: Muon's matrices to NorMuon and
-- back (the checkpoint loader carries the momentum and starts or drops NorMuon's v).
local ALLOWED = { optimizer = { muon = { normuon = true }, normuon = { muon = true } } }
-- Settings a resumed run may change; the difference is printed.
local NOTED = { "batch", "accum", "global_batch", "seed", "lr", "adamw_lr", "embedding_lr",
   "scalar_lr", "weight_decay", "warmup", "steps", "zero", "shard",
   "mode", "layout", "clip", "data", "ranks", "topk", "aux_coef", "ep", "tp", "muon_tp_mode",
   "split_qkv", "optimizer", "data_order" }

local function flag_value(key, value)
   if key == "ranks" then
      return ("%s rank%s"):format(tostring(value), value == 1 and "" or "s")
   end
   return ("--%s %s"):format(key:gsub("_", "-"), type(value) == "number"
      and ("%.10g"):format(value) or tostring(value))
end

-- Where a run's model shape came from: its preset, or an --init-from file's (shape_from).
local function shape_words(s)
   if s.shape_from then return ("--init-from %s's shape"):format(s.shape_from) end
   return ("--preset %s"):format(tostring(s.preset))
end

-- Compares the checkpoint's recorded settings with this run's: refuses the breaking
-- differences, returns the others as one line (or nil), leaving out the keys in `said` (told
-- on a line of their own).
local function compare_settings(saved, now, path, said)
   for _, b in ipairs(BREAKING) do
      local key, flag = b[1], b[2]
      local was = saved[key]
      if was == nil and saved.n_layer ~= nil then was = BEFORE[key] end
      local allowed = was ~= nil and ALLOWED[key] and ALLOWED[key][was]
         and ALLOWED[key][was][now[key]]
      if was ~= nil and was ~= now[key] and not allowed then
         local what = key == "data_kind"
            and ("%s as --data, but the checkpoint was trained on %s"):format(KIND_WORDS[now[key]],
               KIND_WORDS[was] or tostring(was))
            or flag == "--preset"
            and ("%s (%d layers x %d, %d heads), but the checkpoint's model is %s (%s layers x "
               .. "%s, %s heads)"):format(shape_words(now), now.n_layer, now.n_embd, now.n_head,
               shape_words(saved), tostring(saved.n_layer), tostring(saved.n_embd),
               tostring(saved.n_head))
            or ("%s, but the checkpoint was trained with %s"):format(flag_value(key, now[key]),
               flag_value(key, was))
         errors.fail("--resume", "this run has %s: %s cannot continue it (resume with the "
            .. "checkpoint's setting, or start a new run in another --ckpt-dir)", what, path)
      end
   end
   local changed = {}
   for _, key in ipairs(NOTED) do
      if saved[key] ~= nil and saved[key] ~= now[key] and not (said and said[key]) then
         changed[#changed + 1] = ("%s (was %s)"):format(flag_value(key, now[key]),
            key == "ranks" and tostring(saved[key]) or
            flag_value(key, saved[key]):gsub("^%-%-%S+ ", ""))
      end
   end
   return #changed > 0 and ("settings changed since the checkpoint: " .. table.concat(changed,
      ", ")) or nil
end

-- This run's settings (the checkpoints' extra) with --accum at accum.
local function with_accum(run, v, accum)
   local dp = (run.dp_comm or run.comm).size
   return setmetatable({ accum = accum, global_batch = v.batch * accum * dp },
      { __index = run.checkpoint.extra })
end

-- Resuming the checkpoint at path (saved: its settings): the --accum that keeps its global batch
-- (recipe_batch.keep: raises when none can) and the line that says so, or nil.
local function kept_accum(run, v, saved, path)
   return recipe_batch.keep(saved, v, (run.dp_comm or run.comm).size, path)
end

-- The step records the checkpoint's run could not write to its log (it stopped at that step
-- because the log failed), for this run to write first (train.run's log_unwritten) so that the
-- log misses no step; nil when there are none, or when this run's --log is another file (said).
local function unwritten_records(m, v, say)
   local carried = type(m.extra) == "table" and m.extra.log_unwritten
   if type(carried) ~= "table" or type(carried.records) ~= "table" or #carried.records == 0 then
      return nil
   end
   local path = tostring(carried.path)
   if v.log and files.same_file(v.log, path) then return carried.records end
   local n = #carried.records
   say(("resume: the checkpoint carries %d record%s that %s could not take; --log is %s, so "
      .. "%s not written"):format(n, n == 1 and "" or "s", path,
      v.log and "another file" or "not given", n == 1 and "it is" or "they are"))
   return nil
end

-- With --resume: finds the checkpoint (rank 0 looks, every rank loads), refuses one made for
-- another model or whose global batch cannot be kept, keeps it, says what was resumed or why
-- nothing was, and sets the run's lineage. Collective.
local function resume(run, v, say)
   local comm, ck = run.comm, run.checkpoint
   local found, why
   local ok, err = pcall(function()
      if comm.rank ~= 0 then return end
      found, why = checkpoint.find(v.ckpt_dir, { strict = v.resume == "strict" })
      if not v.ckpt_dir_existed then
         why = v.ckpt_dir .. " did not exist (it was created for this run's checkpoints)"
      end
      if found then
         local saved = found.manifest.extra or {}
         local accum, line = kept_accum(run, v, saved, found.path)
         -- refuses a contradicting schedule flag; the warmup of a plan gone on with is its own
         local _, continued = recipe_schedule.resumed(saved, v, found.path)
         found.changes = compare_settings(saved, with_accum(run, v, accum), found.path,
            { accum = line and true, warmup = continued })
      end
   end)
   comm:agree(ok, err)
   local path = comm:broadcast_string(found and found.path or "", 0)
   if path == "" then
      say(("nothing to resume: %s; starting at step 1"):format(why))
      return false
   end
   if found and found.note then say("resume: " .. found.note) end
   local m = checkpoint.load(path, { ddp = run.ddp, opt = run.opt, ep = run.ep, tp = run.tp,
      comm = run.comm })
   -- every rank takes the same --accum from the same manifest
   local accum, batch_line = kept_accum(run, v, m.extra or {}, path)
   local now = with_accum(run, v, accum)
   v.accum, run.accum, ck.extra.accum, ck.extra.global_batch = accum, accum, accum,
      now.global_batch
   run.start_step = m.step + 1
   -- the tokens trained on before, which the log's step records count on from
   run.tokens_before = type(m.extra) == "table" and tonumber(m.extra.tokens) or nil
   ck.resumed_from = path
   -- where a sequential order stopped (recipe_order starts there)
   ck.resumed_position = type(m.extra) == "table" and m.extra.data_position or nil
   ck.run_id = type(m.run_id) == "string" and m.run_id or nil
   run.log_unwritten = unwritten_records(m, v, say)
   say(("resumed from %s: step %d, saved on %d rank%s"):format(path, m.step, m.ranks,
      m.ranks == 1 and "" or "s"))
   -- the schedule it was on (or --reschedule's), which the checkpoints it saves go on with
   local plan, continued = recipe_schedule.resumed(m.extra or {}, v, path)
   recipe_schedule.follow(v, plan)
   run.schedule, ck.extra.schedule, ck.extra.warmup = plan, plan, plan.warmup
   say(recipe_schedule.resume_line(plan, continued, run.start_step, v, run.base_lr))
   if batch_line then say("resume: " .. batch_line) end
   if m.conversion then say("resume: " .. m.conversion) end
   if found and found.changes then say("resume: " .. found.changes) end
   return true
end

-- The checkpoint `best` names in --ckpt-dir into ck (best_val: its validation loss, which a
-- resumed --keep-best run must beat; best_saved, best_step), as rank 0 reads it, the same on
-- every rank; nothing when there is none.
local function resume_best(run, v, ck)
   local loss, step, path = -1, -1, ""
   if run.comm.rank == 0 then
      local ok, best = pcall(checkpoint.best, v.ckpt_dir)
      local m = ok and best and select(2, pcall(checkpoint.read_manifest, best, { files = false }))
      if type(m) == "table" and type(m.extra) == "table" and tonumber(m.extra.val_loss) then
         loss, step, path = tonumber(m.extra.val_loss), m.step, best
      end
   end
   run.comm:set_label("the best checkpoint's validation loss and step")
   local both = run.comm:allreduce({ loss, step }, "max")
   path = run.comm:broadcast_string(path, 0)
   if both[1] >= 0 then ck.best_val, ck.best_step, ck.best_saved = both[1], both[2], path end
end

-- With --ckpt-dir: the run's checkpoint settings, resumed with --resume, and its lineage (the
-- resumed run's, or a new one). Collective.
local function setup_checkpoints(run, v, data, say)
   if not v.ckpt_dir then return end
   run.checkpoint = { dir = v.ckpt_dir, every = v.ckpt_every, keep = v.keep,
      keep_best = v.keep_best, extra = settings(v, run.comm, data) }
   local resumed = v.resume and resume(run, v, say)
   if not resumed or run.checkpoint.run_id == nil then
      run.checkpoint.run_id = checkpoint.new_run_id(run.comm)
   end
   if resumed and v.keep_best then resume_best(run, v, run.checkpoint) end
end

-- For recipe.lua and recipe_report.lua.
recipe_resume.setup_checkpoints = setup_checkpoints
recipe_resume.model_settings = model_settings

return recipe_resume
