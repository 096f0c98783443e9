-- train.lua: the training loop over a model (lw.nn), its buffers (lw.ddp), optimizer (lw.optim)
-- and data (lw.data): micro-steps with gradient accumulation, hooks that overlap communication
-- with compute, the learning rate on a schedule (lw.schedule), evaluation split across ranks, a
-- progress line on rank 0 and JSON lines per step (docs/recipes.md, "The log").
local ffi = require("ffi")
local C = require("lwopt.C")
local json = require("lwopt.json")
local log_writer = require("lwopt.logs.writer")
local qk_clip = require("lwopt.qk_clip")
local schedule = require("lwopt.schedule")

local lib = C.lib
local train = {}

-- lr multiplier at step s (1-based): linear warmup over `warmup` steps, then a cosine from 1
-- (the first step after warmup) down to min_ratio (the last step); lw.schedule has the others.
function train.schedule(s, steps, warmup, min_ratio)
   return schedule.multiplier({ kind = "cosine", steps = steps, warmup = warmup,
      min_ratio = min_ratio }, s)
end

-- Communication so far: { seconds, bytes, by_op (op -> bytes), alltoall (of them the
-- all-to-alls' bytes: a mixture
-- of experts' token exchange), tp (of them the TP group's bytes: tensor parallelism's
-- activations and Muon's TP traffic) }, over the run's communicator; on GPUs the buffers' own
-- (NCCL) communicators, which carry the gradient and parameter syncs; with expert parallelism
-- (run.ep, lw.ep.groups) the EP group's, which carries the tokens (and its device communicator
-- on GPUs), and the expert-DP group's, which syncs the expert buffers; with tensor parallelism
-- (run.tp, lw.tp.groups) the TP group's (and the device communicators the model and the
-- optimizer made over it) and the DP group's, which carries the buffers' syncs.
local function comm_totals(run)
   local t = { seconds = 0, bytes = 0, alltoall = 0, tp = 0, by_op = {} }
   local function add(comm, is_tp)
      if comm == nil then return end
      for op, c in pairs(comm:counters()) do
         t.seconds, t.bytes = t.seconds + c.seconds, t.bytes + c.bytes
         t.by_op[op] = (t.by_op[op] or 0) + c.bytes
         if op == "alltoall" then t.alltoall = t.alltoall + c.bytes end
         if is_tp then t.tp = t.tp + c.bytes end
      end
   end
   add(run.comm)
   if run.ddp then add(run.ddp.device_comm); add(run.ddp.device_expert_comm) end
   if run.ep then add(run.ep.comm); add(run.ep.device_comm); add(run.ep.expert_comm) end
   if run.tp then
      add(run.tp.comm, true); add(run.tp.device_comm, true); add(run.tp.dp_comm)
      local opt_tp = run.opt and run.opt._tp
      if opt_tp and opt_tp ~= run.tp.comm and opt_tp ~= run.tp.device_comm then
         add(opt_tp, true)
      end
   end
   return t
end

-- The communicator the batches are split over: run.dp_comm under tensor parallelism (the TP ranks
-- of a data-parallel replica see the same sequences), else run.comm.
local function data_comm(run) return run.dp_comm or run.comm end

-- The validation sequences of t tokens an evaluation of at most `max` takes ("all" or nil: the
-- whole split), and how many the split has.
function train.eval_count(data, t, max)
   local all = data:val_count(t, math.huge)
   if max == nil or max == "all" then return all, all end
   return math.min(max, all), all
end

-- Mean validation loss over the first `max` validation sequences ("all": every one), split
-- across ranks (the data-parallel ranks), and how many sequences it is over. Every rank runs as
-- many forward passes (at ZeRO-3 each is a series of collectives); a rank past the end reruns
-- the first batch and counts nothing.
function train.evaluate(run, max)
   local model, data, comm = run.model, run.data, data_comm(run)
   local b, t = run.batch, run.seq
   run.ddp:finish_param_sync()
   local count = train.eval_count(data, t, max)
   local sum, rows = 0, 0
   local passes = math.ceil(count / (comm.size * b))
   for pass = 0, passes - 1 do
      local first = (pass * comm.size + comm.rank) * b
      local k = math.max(0, math.min(b, count - first))
      data:val_batch(run.tokens, run.targets, k > 0 and first or 0, count, b, t)
      local loss = model:forward(run.tokens, run.targets, b, t)
      sum, rows = sum + loss * k, rows + k
   end
   local totals = comm:allreduce({ sum, rows })
   return totals[1] / math.max(totals[2], 1), count
end

local info_cell = ffi.new("lw_device_info")

-- Bytes this rank holds: parameters and gradients (lw.ddp), fp32 master weights (bf16
-- parameters), optimizer state, activations; the peak adds the buffers' peak to the others
-- (which only grow). On a GPU also `gpu`: the
-- bytes in use on it as its driver counts them (everything: cuBLAS and NCCL workspaces, the
-- CUDA context, other processes), the figure to compare with nvidia-smi and other trainers.
function train.memory(run)
   local m = run.ddp:memory()
   local optimizer, master = run.opt:state_bytes()
   local activations = require("lwopt.nn").activation_bytes()
   local out = { params = m.params, grads = m.grads, cached = m.cached, optimizer = optimizer,
                 master = master, activations = activations,
                 peak = m.peak + optimizer + master + activations,
                 params_grads_peak = m.peak, budget = m.budget }
   if not run.ddp.host then
      C.check(lib.lw_device_get_info(run.ddp.device, info_cell), "lw.train")
      out.gpu = tonumber(info_cell.total_bytes - info_cell.free_bytes)
   end
   return out
end

-- Every rank's value of each of keys in mine, times scale and rounded to 2 decimals, gathered
-- with one all-reduce (collective): { key = { r0, r1, .. }, .. }.
local function by_rank(comm, mine, keys, scale)
   local flat = {}
   for k = 1, #keys * comm.size do flat[k] = 0 end
   for j, key in ipairs(keys) do flat[(j - 1) * comm.size + comm.rank + 1] = mine[key] end
   flat = comm:allreduce(flat)
   local out = {}
   for j, key in ipairs(keys) do
      local per = json.array()
      for r = 1, comm.size do
         per[r] = math.floor(flat[(j - 1) * comm.size + r] * scale * 100 + 0.5) / 100
      end
      out[key] = per
   end
   return out
end

-- Every rank's figures (MiB), gathered with one all-reduce: { params = { r0, r1, .. }, .. }.
local MEMORY_KEYS = { "params", "master", "grads", "optimizer", "activations", "peak" }
local GPU_MEMORY_KEYS = { "params", "master", "grads", "optimizer", "activations", "peak", "gpu" }
function train.memory_by_rank(run)
   local mine = train.memory(run)
   return by_rank(run.comm, mine, mine.gpu and GPU_MEMORY_KEYS or MEMORY_KEYS, 2 ^ -20)
end

-- A skipped step is said even with --quiet: the update it would have made is lost.
local function say_skipped(run, rec, in_a_row)
   if run.comm.rank ~= 0 then return end
   if run.terminal then io.stdout:write("\r\027[K") end
   io.stdout:flush()
   io.stderr:write(("step %d: update skipped: the gradients are not finite (loss %s, gradient "
      .. "norm %s; %d step%s in a row%s)\n"):format(rec.step, tostring(rec.loss),
      tostring(rec.grad_norm), in_a_row, in_a_row == 1 and "" or "s",
      (run.max_skips or 0) > 0 and (", the run stops at %d"):format(run.max_skips) or ""))
   io.stderr:flush()
end

local function progress(run, rec, t_start, first)
   if run.comm.rank ~= 0 or run.quiet then return end
   local elapsed = lib.lw_now() - t_start
   local eta = elapsed / (rec.step - first + 1) * (run.steps - rec.step)
   local line = ("step %5d/%d  loss %.4f  lr %.2e  %7.0f tok/s%s  eta %4.0fs%s%s"):format(
      rec.step, run.steps, rec.loss, rec.lr, rec.tokens_per_s,
      rec.mfu and ("  mfu %4.1f%%"):format(100 * rec.mfu) or "", eta,
      rec.epoch and ("  epoch %d"):format(rec.epoch) or "",
      rec.val_loss and ("  val %.4f (%d seq)"):format(rec.val_loss, rec.val_sequences) or "")
   if run.terminal and not rec.val_loss and not rec.sample then
      io.stdout:write("\r", line, "\027[K")
   else
      io.stdout:write(run.terminal and "\r" or "", line, run.terminal and "\027[K\n" or "\n")
   end
   if rec.sample then io.stdout:write(rec.sample, "\n") end
   io.stdout:flush()
end

-- Hook point: nil, or a function(step, run) that train.run calls on every rank at the end of
-- each step (after its checkpoint, if any; before the run stops for divergence), for every run;
-- run.on_step_end, when set, is called first, for that run only. Every rank calls them at the
-- same point, so they may issue collectives. The test-only faults (tests/lua/faults.lua) end
-- the job here.
train.on_step_end = nil

-- The loop's state before the first step: the batch buffers, whether progress redraws one
-- line, the log (rank 0), the steps to run and what has been recorded.
local function open_run(run)
   local comm, b, t = run.comm, run.batch, run.seq
   run.tokens = run.tokens or ffi.new("int32_t[?]", b * t)
   run.targets = run.targets or ffi.new("int32_t[?]", b * t)
   -- under mpirun every rank's stdout is a pty, terminal or not: redraw only when asked there
   local _, launched_size = require("lwopt.comm").launched()
   if run.progress == "redraw" then run.terminal = true
   elseif run.progress == "lines" then run.terminal = false
   else run.terminal = lib.lw_is_terminal(1) and launched_size == 1 end
   if run.max_logit or run.qk_clip then run.qk = qk_clip.new(run.model, run.qk_clip) end
   local loop = { first = run.start_step or 1, records = {},
                  ended = { diverged = false, skips_in_a_row = 0 },
                  tokens_per_step = b * t * (run.accum or 1) * data_comm(run).size }
   -- tokens trained on before the first step: a resumed run's from its checkpoint, else as if
   -- every earlier step had this run's global batch
   loop.tokens = run.tokens_before or (loop.first - 1) * loop.tokens_per_step
   if run.log and comm.rank == 0 then
      loop.log = log_writer.open(run.log, loop.first > 1) -- a resumed run appends
      -- first the records the run before could not write (its checkpoint carried them), so
      -- that the log misses no step; a failure here stops the run after its first step, as a
      -- step record's would
      for _, rec in ipairs(run.log_unwritten or {}) do
         loop.log_failed = loop.log_failed or loop.log:write(rec)
      end
      if run.log_config then loop.log_failed = loop.log_failed or loop.log:write(run.log_config) end
   end
   loop.t_start = lib.lw_now()
   loop.last = math.min(run.steps, run.stop_after or run.steps)
   return loop
end

-- A model with experts (lw.nn.GPT with n_expert > 0): its tokens per expert and layer added
-- into sum (a flat list, layer-major; created on the first call), and the number of layers;
-- nil for a dense model.
local function add_expert_counts(model, sum)
   local counts = model.expert_counts and model:expert_counts()
   if counts == nil or #counts == 0 then return nil end
   sum = sum or {}
   local i = 0
   for _, layer in ipairs(counts) do
      for _, c in ipairs(layer) do
         i = i + 1
         sum[i] = (sum[i] or 0) + c
      end
   end
   return sum, #counts
end

-- The step's forward and backward passes, one per micro-step, gradients accumulating: the
-- mean loss over micro-steps, the seconds forward and backward took, and with experts their
-- token counts summed over micro-steps (flat, layer-major), the layers and the mean aux loss.
local function forward_backward(run, step)
   local comm, model, ddp = data_comm(run), run.model, run.ddp
   local b, t, accum = run.batch, run.seq, run.accum or 1
   local fwd, bwd, loss = 0, 0, 0
   local experts, layers, aux = nil, nil, 0
   if run.qk then run.qk:start() end
   ddp:zero_grad()
   for micro = 0, accum - 1 do
      run.data:train_batch(run.tokens, run.targets, run.seed, step, micro, comm.rank, comm.size,
         b, t)
      -- only the last micro-step's backward completes gradients (and starts their sync);
      -- at ZeRO-2/3 every micro-step's does, since gradients are not kept whole between them
      run.report_ready = micro == accum - 1 or ddp.zero >= 2
      local a = lib.lw_now()
      loss = loss + model:forward(run.tokens, run.targets, b, t) / accum
      if run.qk then run.qk:add() end
      experts, layers = add_expert_counts(model, experts)
      if experts then aux = aux + model.aux_loss / accum end
      local m = lib.lw_now()
      model:backward(1 / accum)
      ddp:end_backward()
      -- a GPU's backward is queued, not done: wait, so that bwd times the work
      if not ddp.host then C.check(lib.lw_stream_synchronize(ddp.stream), "lw.train") end
      fwd, bwd = fwd + (m - a), bwd + (lib.lw_now() - m)
   end
   return loss, fwd, bwd, experts and { counts = experts, layers = layers, aux = aux }
end

-- With experts, the step record's expert_counts (per layer, tokens routed to each expert,
-- summed over the step's micro-steps and ranks: a token counts once at each of its topk
-- experts), experts_idle (layer-expert pairs that got no token in the whole step) and aux_loss
-- (the load-balancing loss, mean over micro-steps and ranks; the loss field stays the
-- cross-entropy). One all-reduce (collective).
local function expert_fields(run, rec, experts)
   local comm = run.comm
   local flat = { experts.aux }
   for i, c in ipairs(experts.counts) do flat[i + 1] = c end
   comm:set_label("the step's expert counts")
   flat = comm:allreduce(flat)
   rec.aux_loss = flat[1] / comm.size
   local per = #experts.counts / experts.layers
   local layers, idle = json.array(), 0
   for l = 1, experts.layers do
      local row = json.array()
      for e = 1, per do
         row[e] = flat[1 + (l - 1) * per + e]
         if row[e] == 0 then idle = idle + 1 end
      end
      layers[l] = row
   end
   rec.expert_counts, rec.experts_idle = layers, idle
end

-- The step's figures that differ between ranks, from every rank (milliseconds and MiB): the
-- record's by_rank = { muon_ms, opt_ms, comm_mb, alltoall_mb = { r0, r1, .. } }. Collective.
local STEP_KEYS = { "muon_ms", "opt_ms", "comm_mb", "alltoall_mb" }

-- One optimizer step: its step record (mean loss over ranks, timings, traffic, memory and the
-- per-rank figures with --log) and the optimizer's result (grad_norm, skipped, time).
local function train_step(run, loop, step)
   local comm = run.comm
   local dp = data_comm(run)
   local t0 = lib.lw_now()
   local before = comm_totals(run)
   local loss, fwd, bwd, experts = forward_backward(run, step)
   local lr_scale = run.schedule and schedule.multiplier(run.schedule, step)
      or train.schedule(step, run.steps, run.lr_warmup or 0, run.lr_min_ratio or 0.1)
   -- the largest logits reduced, and QK-clip's scales queued for the step to apply (collective)
   local logits = run.qk and run.qk:finish(run.opt, dp, run.tp and run.tp.comm)
   local o0 = lib.lw_now()
   local r = run.opt:step(lr_scale)
   local opt_time = lib.lw_now() - o0
   dp:set_label("the step's mean loss")
   local mean_loss = dp:allreduce({ loss })[1] / dp.size
   local wall = lib.lw_now() - t0
   local after = comm_totals(run)
   local comm_wait = after.seconds - before.seconds
   local alltoall_mb = (after.alltoall - before.alltoall) / 2 ^ 20
   local opt_ms = 1e3 * (opt_time - r.time.grad_sync - r.time.param_sync)
   loop.tokens = loop.tokens + loop.tokens_per_step
   local rec = {
      kind = "step", step = step, tokens = loop.tokens, loss = mean_loss,
      lr = lr_scale * run.base_lr, grad_norm = r.grad_norm,
      tokens_per_s = loop.tokens_per_step / wall, skipped = r.skipped or nil,
      time_ms = json.object({ fwd = 1e3 * fwd, bwd = 1e3 * bwd, comm_wait = 1e3 * comm_wait,
         opt = opt_ms, muon = 1e3 * r.time.muon, muon_comm = 1e3 * r.time.muon_comm }),
      comm_mb = (after.bytes - before.bytes) / 2 ^ 20,
      tp_mb = run.tp and (after.tp - before.tp) / 2 ^ 20 or nil,
      max_logit = logits and json.array(logits.layers), qk_clipped = logits and logits.clipped,
      -- data read in order (lwopt.data_order): the epoch the step's last sequence is in
      epoch = run.data.order and run.data.order:epoch(step) or nil,
   }
   -- model FLOPs utilisation where the devices' peak is known (lwopt/mfu.lua)
   if run.mfu then
      rec.mfu = rec.tokens_per_s * run.mfu.flops_per_token / run.mfu.peak
   end
   -- the bytes of each kind of collective that moved any (all-gather, reduce-scatter, ...)
   local by_op = json.object()
   for op, bytes in pairs(after.by_op) do
      if bytes > (before.by_op[op] or 0) then by_op[op] = (bytes - before.by_op[op]) / 2 ^ 20 end
   end
   rec.comm_mb_by_op = by_op
   if experts then
      rec.alltoall_mb = alltoall_mb
      expert_fields(run, rec, experts)
   end
   if run.log then -- collectives
      rec.memory_mb = json.object(train.memory_by_rank(run))
      rec.by_rank = json.object(by_rank(comm, { muon_ms = 1e3 * r.time.muon, opt_ms = opt_ms,
         comm_mb = rec.comm_mb, alltoall_mb = alltoall_mb }, STEP_KEYS, 1))
   end
   return rec, r
end

-- The validation loss into the record on eval steps and the last one (collective).
local function evaluate_if_due(run, loop, rec)
   local step = rec.step
   if (run.eval_every and run.eval_every > 0 and step % run.eval_every == 0)
      or step == loop.last then
      run.comm:set_phase(("step %d, evaluation"):format(step))
      rec.val_loss, rec.val_sequences = train.evaluate(run, run.eval_max)
   end
end

-- Every run.sample_every steps the text run.sample(run) gives (a sample from the weights after
-- the step) into the record: on rank 0, or on every rank with run.sample_collective (a forward
-- pass at ZeRO-3, under TP or EP is collective).
local function sample_if_due(run, rec)
   local every = run.sample_every or 0
   if every <= 0 or rec.step % every ~= 0 or run.sample == nil then return end
   if run.comm.rank ~= 0 and not run.sample_collective then return end
   run.comm:set_phase(("step %d, sample"):format(rec.step))
   run.ddp:finish_param_sync()
   rec.sample = run.sample(run)
end

-- The record kept, stamped with the wall clock (seconds since the Unix epoch: when the step and
-- its evaluation ended), written to the log (rank 0; loop.log_failed: why it could not be) and
-- shown on the progress line.
local function report(run, loop, rec)
   rec.wall_time = lib.lw_wall_clock()
   loop.records[#loop.records + 1] = rec
   if loop.log then loop.log_failed = loop.log:write(rec) end
   progress(run, rec, loop.t_start, loop.first)
end

-- The names of the signals that ask a run to stop (lw_stop_requested's numbers, Linux's).
local STOP_SIGNALS = { [2] = "SIGINT", [10] = "SIGUSR1", [15] = "SIGTERM" }

-- Whether the run stops after this step, known to every rank from one all-reduce, so that all of
-- them stop at the same step: rank 0 could not write the step's record (a log), or a rank was
-- asked to stop by a signal (lw_stop_requested: preemption, Ctrl-C). ended.stopped says why
-- (rank 0's words for the log; the others know only that it failed) and, for a signal, which.
local function stop_if_asked(run, loop, step)
   local failed, signal = loop.log_failed and 1 or 0, lib.lw_stop_requested()
   if run.comm.size > 1 then
      run.comm:set_label("whether the log took the step's record and whether a rank must stop")
      local both = run.comm:allreduce({ failed, signal }, "max")
      failed, signal = both[1], both[2]
   end
   if failed > 0 then
      loop.ended.stopped = { step = step, why = "--log: " .. (loop.log_failed
         or "rank 0 could not write the log") }
   end
   if signal > 0 then
      loop.ended.stopped = loop.ended.stopped or { step = step }
      loop.ended.stopped.signal = STOP_SIGNALS[signal] or ("signal %d"):format(signal)
   end
end

-- Counts steps skipped in a row for non-finite gradients, and says so.
local function count_skip(run, ended, rec, update)
   if update.skipped then
      ended.skips_in_a_row = ended.skips_in_a_row + 1
      if ended.skips_in_a_row == 1 then ended.first_skip = rec.step end
      say_skipped(run, rec, ended.skips_in_a_row)
   else
      ended.skips_in_a_row = 0
   end
end

-- A checkpoint every ckpt.every steps, at the last one, at a step where the run stops for a
-- failed output, and with ckpt.keep_best at a validation loss below ckpt.best_val (then `best`
-- names it: ckpt.best_val, best_saved, best_step), unless the update was skipped (collective). A save that fails (a full disk)
-- stops the run at this step instead of ending it: ended.stopped.save_error says why, and the
-- checkpoints saved before are left as they were; ended.stopped.checkpoint is the one saved at
-- the step the run stops.
local function checkpoint_if_due(run, loop, rec, update)
   local ckpt, stopped, step = run.checkpoint, loop.ended.stopped, rec.step
   -- keep_best: a validation loss below every one before is saved, and `best` names it
   local best = ckpt and ckpt.keep_best and rec.val_loss ~= nil
      and rec.val_loss < (ckpt.best_val or math.huge)
   if ckpt and ckpt.dir and not update.skipped and ((ckpt.every or 0) > 0
      and step % ckpt.every == 0 or step == loop.last or stopped or best) then
      run.comm:set_phase(("step %d, checkpoint save"):format(step))
      -- the tokens trained on so far, which a resumed run counts on from (run.tokens_before),
      -- and the records the log could not take (rank 0 writes the manifest), which the run
      -- that resumes writes first (run.log_unwritten)
      if ckpt.extra then
         ckpt.extra.tokens = loop.tokens
         ckpt.extra.val_loss, ckpt.extra.val_sequences = rec.val_loss, rec.val_sequences
         -- data read in order: where the next step reads, which a resumed run starts from
         ckpt.extra.data_position = run.data.order and run.data.order:after(step) or nil
         local unwritten = loop.log and loop.log.unwritten
         ckpt.extra.log_unwritten = unwritten and json.object({ path = run.log,
            records = json.array(unwritten) }) or nil
      end
      local ok, saved = pcall(require("lwopt.checkpoint").save, ckpt.dir, { ddp = run.ddp,
         opt = run.opt, step = step, keep = ckpt.keep, extra = ckpt.extra, run_id = ckpt.run_id,
         protect = ckpt.resumed_from and { ckpt.resumed_from } or nil, ep = run.ep, tp = run.tp,
         comm = run.comm, best = best })
      if not ok then
         stopped = stopped or { step = step }
         stopped.save_error = tostring(saved)
         loop.ended.stopped = stopped
      else
         ckpt.last_saved = saved
         if best then ckpt.best_val, ckpt.best_saved, ckpt.best_step = rec.val_loss, saved, step end
         if stopped then stopped.checkpoint = saved end
      end
   end
end

local function notify_step_end(run, step)
   if run.on_step_end then run.on_step_end(step, run) end
   if train.on_step_end then train.on_step_end(step, run) end
end

-- Whether the run stops: max_skips steps in a row skipped.
local function diverged(run, ended)
   if (run.max_skips or 0) > 0 and ended.skips_in_a_row >= run.max_skips then
      ended.diverged = true
   end
   return ended.diverged
end

local function close_run(run, loop)
   if loop.log then loop.log:close() end
   run.comm:set_phase(nil)
   return loop.records, loop.ended
end

-- Runs `steps` optimizer steps. run = { comm, dp_comm (tensor parallelism: the data-parallel
-- group the batches are split over; default comm), model (bound to ddp with train.hooks), ddp,
-- opt, data, steps, batch, seq, accum, seed, lr_warmup, lr_min_ratio (or schedule: an
-- lw.schedule plan, which replaces both and whose steps may differ from the run's), base_lr (the
-- peak the step records' lr is a multiple of), eval_every, eval_max, log
-- (path or nil), log_config (a record written to the log before the first step's: the run's
-- configuration, kind "config"), tokens_before (tokens trained on before start_step; default
-- (start_step - 1) x this run's tokens per step), quiet, progress ("auto" | "redraw" |
-- "lines"), start_step (resume: 1-based first step to run), stop_after (last step to run; the
-- schedule still spans `steps`), max_skips (stop after this many steps in a row skipped for
-- non-finite gradients; 0 or nil: never), max_logit (measure and record every layer's largest
-- attention logit each step), qk_clip (tau: QK-clip at that logit, lwopt/qk_clip.lua; measures
-- too), mfu = { flops_per_token, peak (FLOP/s of all the run's devices) } (the records' mfu,
-- lwopt/mfu.lua; nil: none), sample_every and sample (a function(run) -> text: the record's sample every
-- sample_every steps; sample_collective: every rank calls it), checkpoint = { dir, every,
-- keep, keep_best, best_val (resumed), extra (settings the
-- manifest keeps, and the tokens trained on so far), run_id, resumed_from; last_saved is set to
-- each checkpoint saved }, on_step_end (a hook, above) }. Returns the step records (kind
-- "step", with tokens, the tokens trained on through the step, and wall_time) and how the run
-- ended: { diverged = bool, skips_in_a_row = n, first_skip = step, stopped = nil | { step,
-- why (the log could not be written), signal ("SIGTERM", "SIGUSR1", "SIGINT": a rank was asked
-- to stop, lw_stop_requested), save_error (a checkpoint could not be saved), checkpoint (the one
-- saved at that step) } }: a failed output or a request to stop ends the run after its step,
-- checkpointed when it can be. log_unwritten: records a run before could not write to this log,
-- written first. A step whose update was skipped is not checkpointed: its parameters may
-- already be the cause.
function train.run(run)
   local loop = open_run(run)
   for step = loop.first, loop.last do
      run.comm:set_phase(("step %d"):format(step)) -- named by the watchdog if a collective hangs
      local rec, update = train_step(run, loop, step)
      evaluate_if_due(run, loop, rec)
      sample_if_due(run, rec)
      report(run, loop, rec)
      count_skip(run, loop.ended, rec, update)
      stop_if_asked(run, loop, step)
      checkpoint_if_due(run, loop, rec, update)
      notify_step_end(run, step)
      if loop.ended.stopped or diverged(run, loop.ended) then break end
   end
   return close_run(run, loop)
end

-- Hooks for model:bind: before a parameter is read, its group must be there (its gather done,
-- or at ZeRO-3 gathered); when a gradient is complete (last micro-step only, every micro-step at
-- ZeRO-2/3), its bucket may start syncing.
function train.hooks(run)
   local ddp = run.ddp
   local hooks = ddp:hooks()
   hooks.ready = function(name)
      if run.report_ready ~= false then ddp:grad_ready(name) end
   end
   return hooks
end

return train
