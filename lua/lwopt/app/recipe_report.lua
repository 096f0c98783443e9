-- recipe_report.lua: what the recipe says: the line that announces a run (model, ranks,
-- data, routing, device), and the end of a run (memory per rank, the final loss, the loss
-- curve, --save-params, the sample) with the exit status every rank agrees on.
local ffi = require("ffi")
local lw = require("lwopt")
local train = require("lwopt.train")
local safetensors = require("lwopt.safetensors")
local files = require("lwopt.files")
local logs = require("lwopt.logs")
local weights = require("lwopt.weights")
local json = require("lwopt.json")
local sampling = require("lwopt.sampling")
local C = require("lwopt.C")
local errors = require("lwopt.errors")
local recipe_tp = require("lwopt.app.recipe_tp")
local recipe_paths = require("lwopt.app.recipe_paths")
local recipe_flags = require("lwopt.app.recipe_flags")
local recipe_resume = require("lwopt.app.recipe_resume")

local recipe_report = {}

local model_settings = recipe_resume.model_settings

-- Bytes per rank, printed as a table at the end of a run.
-- On a GPU a last column: the GPU's memory in use as its driver counts it.
local function memory_table(by_rank)
   local gpu = by_rank.gpu
   local lines = { "memory per rank (MiB): rank  params  master  grads  optimizer  activations"
      .. "  peak" .. (gpu and "  gpu in use" or "") }
   for r = 1, #by_rank.params do
      lines[#lines + 1] = ("  %4d %8.2f %7.2f %6.2f %10.2f %12.2f %6.2f"):format(r - 1,
         by_rank.params[r], by_rank.master[r], by_rank.grads[r], by_rank.optimizer[r],
         by_rank.activations[r], by_rank.peak[r]) .. (gpu and ("  %10.2f"):format(gpu[r]) or "")
   end
   return table.concat(lines, "\n")
end

-- Draws the log's train and validation losses (nats per `unit`: byte, token) with gnuplot
-- (lwopt.logs, as `lwopt plot` does); returns the PNG's path, or nil and why not. Non-finite
-- losses (null in the log) are gaps in the curve.
local function plot(log_path, unit)
   local read, log = pcall(logs.read, log_path)
   if not read then return nil, log end
   return logs.plot({ log }, { out = recipe_paths.plot(log_path),
      data = recipe_paths.plot_data(log_path), unit = unit })
end

-- The sample's heading and text (lwopt.sampling, as `lwopt sample` prints from a checkpoint):
-- bytes as text after the prompt, among the bytes of the training text; token data's ids (the
-- prompt: --prompt-ids or the first 8 validation tokens), decoded with --tokenizer when given.
local function sample_text(run, v)
   local s = { count = v.sample, seq = v.seq, seed = v.seed, vocab = v.vocab,
               temperature = v.temperature, top_k = v.top_k, tokenizer = v.tokenizer_read }
   if run.data.kind ~= "tokens" then
      s.kind, s.prompt = "bytes", v.prompt or sampling.BYTE_PROMPT
      s.allowed = sampling.bytes_seen(run.data)
   else
      s.kind = "tokens"
      s.prompt = v.prompt_ids
      if s.prompt == nil then
         s.prompt, s.prompt_from = sampling.default_token_prompt(run.data, v.seq)
      end
   end
   return sampling.text(run.model, s)
end

recipe_report.sample_text = sample_text

-- What one position of the data is: "byte" or "token".
local function unit_of(data) return data.kind == "tokens" and "token" or "byte" end

-- Why a run asked to stop by a signal stopped, in a user's words.
local SIGNAL_WORDS = { SIGTERM = "SIGTERM (a scheduler's request to stop)",
   SIGUSR1 = "SIGUSR1 (a request to stop ahead of a time limit)", SIGINT = "Ctrl-C (SIGINT)" }

-- What a run stopped by a failed output or a signal (train.run's ended.stopped) says: why, and
-- where its training state is (the checkpoint saved at that step, else the last this run saved).
local function stopped_text(run, v, stopped)
   local unsaved = stopped.save_error and ("the checkpoint of step %d could not be saved: %s")
      :format(stopped.step, stopped.save_error)
   local signal = stopped.signal and ("asked to stop by %s"):format(SIGNAL_WORDS[stopped.signal]
      or stopped.signal)
   local lines = { ("stopped after step %d: %s"):format(stopped.step,
      stopped.why or signal or unsaved) }
   if stopped.why and signal then lines[#lines + 1] = signal end
   if (stopped.why or signal) and unsaved then lines[#lines + 1] = unsaved end
   local ck = run.checkpoint
   local last = stopped.checkpoint or (ck and (ck.last_saved or ck.resumed_from))
   if last then
      lines[#lines + 1] = ("the training state is in %s: %s"):format(last,
         (stopped.why or unsaved) and "resume from it with --resume once the outputs can be written"
         or "run the same command with --resume to continue from it")
   elseif ck then
      lines[#lines + 1] = "no checkpoint of this run could be saved"
   else
      lines[#lines + 1] = "without --ckpt-dir nothing of this run was saved"
   end
   return table.concat(lines, "\n")
end

-- The exit status of a run stopped on a signal with its state saved (or with nothing to save):
-- EXIT_STOPPED, on which a job script requeues, or EXIT_INTERRUPTED after Ctrl-C; nil otherwise.
local function signal_status(stopped)
   if stopped == nil or stopped.signal == nil or stopped.why or stopped.save_error then
      return nil
   end
   return stopped.signal == "SIGINT" and recipe_flags.EXIT_INTERRUPTED or recipe_flags.EXIT_STOPPED
end

-- A word for the shell as it is, or single-quoted when it holds anything else.
local function shell_word(text)
   if text:match("^[%w/._,:=+-]+$") then return text end
   return "'" .. text:gsub("'", "'\\''") .. "'"
end

local function readable(path)
   local f = path and io.open(path, "r")
   if f then f:close() end
   return f ~= nil
end

-- path with its "dir/../" steps taken out ("recipes/../data/kjv.txt" -> "data/kjv.txt") when
-- that names a file too (a step through a link may not), else as it is.
local function tidy(path)
   local out, n = path, 1
   while n > 0 do out, n = out:gsub("^%./", ""):gsub("[^/]+/%.%./", "", 1) end
   if out ~= path and readable(out) then return out end
   return path
end

-- The command that runs lwopt's CLI from the working directory: the running tree's bin/lwopt,
-- else `lwopt` (installed).
local function lwopt_command()
   local tree = recipe_paths.tree()
   local bin = tree and tree .. "/bin/lwopt"
   if not readable(bin) then return "lwopt" end
   return shell_word(tidy(bin))
end

-- What a finished run with --ckpt-dir can do next, as commands that run as written: another
-- sample, the loss over the whole validation split, a resume that trains on, an export.
local function next_text(run, v, path, last)
   local cmd, dir = lwopt_command(), shell_word(v.ckpt_dir)
   -- a models file's model: the commands load its file as the recipe did
   local file = lw.models.get(v.arch).file
   if file then dir = dir .. " --models " .. shell_word(tidy(file)) end
   local tokens = run.data.kind == "tokens"
   local lines = { ("next, from the checkpoint in %s:"):format(v.ckpt_dir),
      ("  %s sample %s%s   # another sample"):format(cmd, dir, tokens and ""
         or " --prompt 'And Jesus said' --temperature 1 --top-k 20"),
      ("  %s eval %s --data %s --eval-max all   # the whole validation split"):format(cmd, dir,
         shell_word(tidy(path))),
      ("  the same command%s with --resume --steps %d   # trains on from step %d"):format(
         v.overwrite and " without --overwrite," or "", 2 * v.steps, last) }
   -- the export formats hold dense models, each format its registry entry's (hf-gpt2,
   -- hf-llama, nanochat; a recipe's own model: none)
   local format = lw.models.get(v.arch).formats[1]
   if (v.n_expert or 0) == 0 and format then
      local nanochat = format == "nanochat"
      lines[#lines + 1] = ("  %s export %s --format %s %s   # for %s"):format(cmd, dir, format,
         shell_word(v.ckpt_dir:gsub("/+$", "") .. (nanochat and "-nanochat" or "-hf")),
         nanochat and "nanochat" or "transformers")
   end
   return table.concat(lines, "\n")
end

-- The end of a run: memory per rank, the final validation loss, the loss curve, the
-- parameters and the sample, each independent of the others (one failing skips none of the
-- rest, and the parameters are always written when asked). Collective. Returns the exit status
-- every rank agrees on: 0, 1 when an output failed, EXIT_DIVERGED when the run diverged.
local function finish(run, v, records, ended, say, path)
   local comm, ddp = run.comm, run.ddp
   local problems = {}
   local function attempt(what, fn)
      local ok, err = pcall(fn)
      if not ok then problems[#problems + 1] = what .. ": " .. tostring(err) end
   end
   ddp:finish_param_sync()
   local memory = train.memory_by_rank(run) -- collective
   if not v.quiet then say(memory_table(memory)) end
   local final = records[#records]
   if ended.stopped then say(stopped_text(run, v, ended.stopped), io.stderr) end
   if ended.diverged then
      say(("stopped: %d steps in a row (from step %d) had non-finite gradients, so the loss "
         .. "diverged and no update was made; lower --lr (now %g) or --warmup, or raise "
         .. "--max-skips (now %d)"):format(ended.skips_in_a_row, ended.first_skip, v.lr,
         v.max_skips), io.stderr)
   elseif final and final.val_loss then
      local count, all = train.eval_count(run.data, run.seq, run.eval_max)
      say(("final validation loss %.4f (%.3f bits/%s) over %s"):format(final.val_loss,
         final.val_loss / math.log(2), unit_of(run.data), count == all
         and ("all %d validation sequences"):format(all)
         or ("the first %d of %d validation sequences (--eval-max all: every one)"):format(count,
            all)))
   end
   local ck = run.checkpoint
   if ck and ck.keep_best and ck.best_saved then
      say(("best validation loss %.4f at step %d: %s (%s/best names it)"):format(ck.best_val,
         ck.best_step, ck.best_saved, ck.dir))
   end
   if v.log and comm.rank == 0 and #records > 0 then
      attempt("loss curve", function()
         local png, why = plot(v.log, unit_of(run.data))
         if png == nil then errors.raise(why) end
         say("loss curve: " .. png)
      end)
   end
   -- a run asked to stop has no end yet: its parameters and sample come when it finishes
   local asked_to_stop = ended.stopped and ended.stopped.signal
   if v.save_params and not asked_to_stop then
      local tensors = ddp:params_on(0) -- collective at ZeRO-3
      if run.ep then lw.ep.gather_experts(ddp, run.ep, tensors) end -- every expert on rank 0
      recipe_tp.full_tensors(run, tensors) -- with --tp, the full tensors on rank 0
      if comm.rank == 0 then
         attempt("--save-params", function()
            -- beside it first, then renamed: a kill mid-write leaves the previous file whole
            local tmp = v.save_params .. ".tmp"
            local written, why = pcall(safetensors.write, tmp, tensors,
               { { weights.SETTINGS_KEY, json.encode(model_settings(v)) } })
            if not written then
               os.remove(tmp) -- what a full disk let through is no use to anyone
               errors.raise(why)
            end
            files.rename(tmp, v.save_params)
            say("parameters: " .. v.save_params)
         end)
      end
   end
   -- at ZeRO-3, over a TP group and under expert parallelism (the experts' all-to-all) a
   -- forward pass is collective: every rank samples (the same text), rank 0 prints
   if v.sample > 0 and not ended.diverged and not asked_to_stop
      and (comm.rank == 0 or run.sample_collective) then
      attempt("sample", function() say(sample_text(run, v)) end)
   end
   if v.ckpt_dir and run.checkpoint.last_saved and not ended.stopped and not ended.diverged
      and not v.quiet and comm.rank == 0 and #problems == 0 then
      say(next_text(run, v, path, records[#records].step))
   end
   for _, problem in ipairs(problems) do say("failed: " .. problem, io.stderr) end
   local status = ended.diverged and recipe_flags.EXIT_DIVERGED
      or (#problems == 0 and signal_status(ended.stopped))
      or ((#problems > 0 or ended.stopped) and 1 or 0)
   return comm:allreduce({ status }, "max")[1]
end

-- Where the data comes from: "path (N bytes)", or for token shards "pattern (2 shards, N
-- tokens; validation: val pattern (1 shard, N tokens)); vocabulary 50257 (50304 rows)".
local function data_line(data, v, path)
   if data.kind ~= "tokens" then return ("%s (%d bytes)"):format(path, data.n) end
   local val = data.val_path and ("%s (%s)"):format(data.val_path, data:describe("val"))
      or ("the last %d tokens"):format(data.n_val)
   return ("%s (%s; validation: %s); vocabulary %d (%d rows)"):format(path,
      data:describe("train"), val, v.vocab, v.vocab_rows)
end

-- The model's parameters in words: "0.85M parameters", or with experts "8 experts, top-2 (+ a
-- shared expert), 3.40M parameters, 1.02M active per token" (active: the dense parameters and
-- topk / n_expert of the experts').
function recipe_report.parameters_text(specs, v)
   local total = lw.arch.numel(specs)
   if (v.n_expert or 0) == 0 then return ("%.2fM parameters"):format(total / 1e6) end
   local experts = {}
   for _, s in ipairs(specs) do
      if s.expert then experts[#experts + 1] = s end
   end
   local expert_numel = lw.arch.numel(experts)
   local active = total - expert_numel + expert_numel * v.topk / v.n_expert
   return ("%d experts, top-%d%s, %.2fM parameters, %.2fM active per token"):format(v.n_expert,
      v.topk, v.shared_expert and " (+ a shared expert)" or "", total / 1e6, active / 1e6)
end

-- How the routing rules split the model's parameters (specs: routed, each with .optimizer), the
-- whole-matrix rules first, each in lw.optim.kinds' order, a rule with nothing routed to it left
-- out: "routing: muon 24 matrices (85.00M elements), adamw 50 tensors (39.10M elements)".
function recipe_report.routing_text(specs)
   local count, numel = {}, {}
   for _, s in ipairs(specs) do
      count[s.optimizer] = (count[s.optimizer] or 0) + 1
      numel[s.optimizer] = (numel[s.optimizer] or 0) + lw.arch.numel({ s })
   end
   local parts = {}
   for _, whole in ipairs({ true, false }) do
      for _, kind in ipairs(lw.optim.kinds) do
         local n = kind.whole == whole and count[kind.name]
         if n then
            local one, many = "tensor", "tensors"
            if whole then one, many = "matrix", "matrices" end
            parts[#parts + 1] = ("%s %d %s (%.2fM elements)"):format(kind.name, n,
               n == 1 and one or many, numel[kind.name] / 1e6)
         end
      end
   end
   return "routing: " .. table.concat(parts, ", ")
end

-- The line that says what this run trains, where and on what.
local function announce(run, v, data, path, say)
   if v.quiet then return end
   local dp = run.dp_comm or run.comm
   -- the model by its registry entry's title; its KV heads unless GPT-2's all-heads default
   local kv = v.model_config.n_kv_head
   local model = ("%s %d layers x %d, %d heads%s"):format(lw.models.get(v.arch).title,
      v.n_layer, v.n_embd, v.n_head, (v.arch ~= "gpt" or kv ~= v.n_head)
      and (" (%d KV)"):format(kv) or "")
   say(("lwopt %s: %s, %s; %s/%s ZeRO-%d%s on %s, global batch %d x %d %ss; %s"):format(
      lw.version, model,
      recipe_report.parameters_text(run.full_specs or run.ddp.specs, v),
      v.optimizer, v.mode, v.zero, v.shard == "rows" and " row-sharded" or "",
      recipe_tp.ranks_text(run), v.batch * v.accum * dp.size, v.seq, unit_of(data),
      data_line(data, v, path)))
   -- the whole model's parameters at any --ep or --tp, routed by the run's rules
   say(recipe_report.routing_text(run.full_specs and lw.route(run.full_specs, run.rules,
      { warn = false }) or run.ddp.specs))
   -- the device the buffers live on, as lw_device_get_info describes it
   local name = ffi.string(C.lib.lw_device_name(run.ddp.device))
   say("device: " .. (lw.device_line(name) or name))
   -- how its buffers move between ranks, and why (ranks sharing one GPU go through the host)
   local dc = run.ddp.device_comm
   if dc and dc.about ~= "" then say("collectives: " .. dc.about) end
   local note = recipe_tp.note(run, v)
   if note then say(note) end
end

-- For recipe.lua.
recipe_report.finish, recipe_report.announce = finish, announce

return recipe_report
