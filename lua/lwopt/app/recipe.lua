-- recipe.lua: the body of recipes/gpt_small.lua (and recipes that change its routing): parse
-- the flags, build the GPT (dense, or a mixture of experts: --n-expert, --preset moe), its
-- buffers and optimizer, train on a byte-level corpus or on token shards (llm.c's format), then
-- report the final validation loss, plot the loss curve and print a sample. The presets are
-- the library's (presets.lua) and the recipe's own; flags (with --config and the schedule),
-- resume and report are recipe_flags.lua, recipe_resume.lua and recipe_report.lua; this module
-- runs them in order and gathers their public names.
local ffi = require("ffi")
local lw = require("lwopt")
local train = require("lwopt.train")
local data_mod = require("lwopt.data")
local tokens_mod = require("lwopt.tokens")
local files = require("lwopt.files")
local checkpoint = require("lwopt.checkpoint")
local init_from = require("lwopt.init_from")
local C = require("lwopt.C")
local mfu = require("lwopt.mfu")
local errors = require("lwopt.errors")
local recipe_tp = require("lwopt.app.recipe_tp")
local recipe_paths = require("lwopt.app.recipe_paths")
local recipe_batch = require("lwopt.app.recipe_batch")
local recipe_log = require("lwopt.app.recipe_log")
local presets = require("lwopt.presets")
local recipe_flags = require("lwopt.app.recipe_flags")
local recipe_resume = require("lwopt.app.recipe_resume")
local recipe_report = require("lwopt.app.recipe_report")
local recipe_init = require("lwopt.app.recipe_init")
local recipe_order = require("lwopt.app.recipe_order")
local recipe_nanochat = require("lwopt.app.recipe_nanochat")

local recipe = {}

-- The public names, as before the recipe was split: presets and the model's configuration,
-- the flags and exit statuses, the data's name and the texts of the announcement.
for _, name in ipairs({ "presets", "MOE_DEFAULTS", "VOCAB_MULTIPLE", "vocab_rows",
   "gpt_config" }) do
   recipe[name] = presets[name]
end
recipe.flags = recipe_flags.list
recipe.EXIT_USAGE, recipe.EXIT_DIVERGED = recipe_flags.EXIT_USAGE, recipe_flags.EXIT_DIVERGED
recipe.EXIT_STOPPED, recipe.EXIT_INTERRUPTED = recipe_flags.EXIT_STOPPED,
   recipe_flags.EXIT_INTERRUPTED
recipe.data_name = recipe_resume.data_name
recipe.parameters_text = recipe_report.parameters_text
recipe.routing_text = recipe_report.routing_text

local check_flags, parse_flags = recipe_flags.check, recipe_flags.parse
local warn_schedule = recipe_flags.warn_schedule
local setup_checkpoints = recipe_resume.setup_checkpoints
local finish, announce = recipe_report.finish, recipe_report.announce

-- The next state of a 31-bit linear congruential generator: seeded, the same on every rank.
local function lcg(state) return (state * 1103515245 + 12345) % 2147483648 end

-- Seeded parameter initialisation, the same on every rank (GPT-2's: normal(0, 0.02), residual
-- projections scaled by 1/sqrt(2 n_layer), norm gains 1, biases 0), one parameter at a time in
-- definition order (collective at ZeRO-3, where each is written into its gathered group). every:
-- the ep 1 (tp 1) model's parameters with --ep (--tp), whose draws are made in its order, those
-- of experts held by another EP rank skipped, so every --ep starts from the same values; with
-- --tp (g: lw.tp.groups's table) a sharded tensor's draws are the whole tp 1 tensor's, of which
-- this TP rank keeps its shard, so every --tp starts from the same values too.
-- plan (optional): the model's own initialisation (its registry entry's init), by parameter: a
-- spec -> { normal = std } | { uniform = { lo, hi } } | { values = list } | { zeros = true }, or
-- nil for the above.
local function init_params(model, ddp, seed, n_layer, every, g, plan)
   local state = seed
   local function uniform()
      state = lcg(state)
      return (state + 0.5) / 2147483648
   end
   local function normal() -- Box-Muller
      return math.sqrt(-2 * math.log(uniform())) * math.cos(2 * math.pi * uniform())
   end
   -- the value of element i (0-based) by a plan, drawing as it goes
   local function planned(how, i)
      if how.normal then return how.normal * normal() end
      if how.uniform then return how.uniform[1] + (how.uniform[2] - how.uniform[1]) * uniform() end
      return how.values and how.values[i + 1] or 0
   end
   local held = {}
   for _, spec in ipairs(model:parameters()) do held[spec.name] = spec end
   for _, spec in ipairs(every or model:parameters()) do
      local mine = held[spec.name]
      local how = plan and plan(spec)
      if how then
         local numel = lw.tp.numel(spec.shape)
         -- not held here (another EP rank's): drawn all the same, so that the draws line up
         local into = mine and (mine.tp and ffi.new("float[?]", numel)) or nil
         local function fill(data)
            local out = into or data
            for i = 0, numel - 1 do
               local x = planned(how, i)
               if out then out[i] = x end
            end
            if mine and mine.tp then lw.tp.from_model(into, mine, g.size, g.rank, data) end
         end
         if mine then ddp:with_param(spec.name, function(p) fill(p.data) end) else fill(nil) end
      elseif mine then
         ddp:with_param(spec.name, function(p)
            if spec.role == "norm" then
               p:fill(1)
            elseif spec.role == "bias" then
               p:fill(0)
            else
               local std = 0.02
               if spec.name:match("proj%.weight$") then std = 0.02 / math.sqrt(2 * n_layer) end
               local into = p.data
               -- a TP shard: the tp 1 model's tensor drawn, this rank's shard kept
               if mine.tp then into = ffi.new("float[?]", lw.tp.numel(spec.shape)) end
               for i = 0, lw.tp.numel(spec.shape) - 1 do into[i] = std * normal() end
               if mine.tp then lw.tp.from_model(into, mine, g.size, g.rank, p.data) end
            end
         end)
      elseif spec.role ~= "norm" and spec.role ~= "bias" then
         -- another EP rank's expert: its draws, skipped
         local numel = 1
         for _, d in ipairs(spec.shape) do numel = numel * d end
         for _ = 1, numel do normal() end
      end
   end
end

-- Outputs checked on every rank before the first step (each rank the paths it writes: the
-- checkpoint directory all of them, the log, loss curve and parameters rank 0), the checkpoint
-- directory locked for this job (rank 0 holds the lock, returned; nil without --ckpt-dir), and
-- a new run refused in a checkpoint directory that holds another run's checkpoints without
-- --overwrite. Collective.
local function check_outputs(comm, v)
   local lock
   if v.ckpt_dir then
      local looked, kind = pcall(files.kind, v.ckpt_dir)
      v.ckpt_dir_existed = not looked or kind ~= "missing"
      comm:barrier() -- every rank looks before any creates it
   end
   local ok, err = pcall(function()
      local function must(good, message) if not good then errors.raise(message) end end
      if v.ckpt_dir then
         must(files.check_writable_dir(v.ckpt_dir, "--ckpt-dir", "r" .. comm.rank))
         if comm.rank == 0 then
            local why, busy
            lock, why, busy = checkpoint.lock(v.ckpt_dir)
            must(lock, busy and ("--ckpt-dir %s: two jobs saving into one directory would write "
               .. "over each other's checkpoints: wait for the other one to end, or choose "
               .. "another directory"):format(why)
               or ("--ckpt-dir %s cannot be locked: %s"):format(v.ckpt_dir, why))
            local good
            good, why = checkpoint.check_dir(v.ckpt_dir)
            must(good, ("--ckpt-dir %s: %s"):format(v.ckpt_dir, why))
         end
         if comm.rank == 0 and not v.resume then
            local holds, what = checkpoint.holds(v.ckpt_dir)
            if holds and not v.overwrite then
               errors.fail(nil, "--ckpt-dir %s already holds checkpoints (%s): add --resume to "
                  .. "continue from them, --overwrite to start a new run over them, or choose "
                  .. "another directory", v.ckpt_dir, what)
            end
         end
      end
      if comm.rank == 0 then
         if v.log then
            must(files.check_writable(v.log, "--log"))
            must(files.check_writable(recipe_paths.plot(v.log), "the loss curve",
               ("beside --log '%s'"):format(v.log)))
         end
         if v.save_params then must(files.check_writable(v.save_params, "--save-params")) end
      end
   end)
   comm:agree(ok, err)
   return lock
end

-- The world communicator with --timeout (which bounds MPI's start-up too), and say(text [,
-- stream]): a line on rank 0.
local function start_comm(v)
   local comm = lw.comm.init(v.timeout)
   local function say(text, stream)
      if comm.rank ~= 0 then return end
      stream = stream or io.stdout
      stream:write(text, "\n")
      stream:flush()
   end
   return comm, say
end

-- The corpus: --data (a text file, or token shards with --val-data), or the KJV in data/ of the
-- lwopt tree (recipe_paths.default_data); returns it and its path.
local function load_data(v, script)
   if v.data_kind == "tokens" then
      local data = tokens_mod.open(v.data, { vocab = v.vocab, seq_len = v.seq, val = v.val_data,
         hint = (" (the vocabulary is %d%s; --vocab sets it)"):format(v.vocab,
         v.vocab_given and "" or (", --preset %s's"):format(v.preset)) })
      return data, v.data
   end
   local path = v.data or recipe_paths.default_data(script)
   local data = data_mod.load(path, { seq_len = v.seq, hint = v.data == nil and
      ". Prepare the default corpus with `make data` (needs Debian's bible-kjv package)" or "" })
   return data, path
end

-- rules with every parameter they route to Muon routed to NorMuon (--optimizer normuon).
function recipe.to_normuon(rules)
   local out = {}
   for i, rule in ipairs(rules) do
      local copy = {}
      for k, x in pairs(rule) do copy[k] = x end
      if copy.optimizer == "muon" then copy.optimizer = "normuon" end
      out[i] = copy
   end
   return out
end

-- The routed specs with the learning rates of the AdamW groups that have a flag of their own
-- (--embedding-lr, --scalar-lr) where their routing rule sets none: nanochat's groups; the
-- matrices' are --lr (Muon) and --adamw-lr (AdamW), as lw.optim.new's options give them.
local LR_OF_ROLE = { embedding = "embedding_lr", output = "embedding_lr", norm = "scalar_lr",
   bias = "scalar_lr" }
function recipe.with_group_lrs(specs, v)
   for _, spec in ipairs(specs) do
      local key = LR_OF_ROLE[spec.role]
      if key and spec.optimizer == "adamw" and not (spec.opts and spec.opts.lr) and
         v[key] ~= v.adamw_lr then
         local opts = {}
         for k, x in pairs(spec.opts or {}) do opts[k] = x end
         opts.lr = v[key]
         spec.opts = opts
      end
   end
   return specs
end

-- The run's MFU figures (train.run's run.mfu): the FLOPs of a token of the whole model (specs)
-- and the peak of the ranks' devices, --peak-tflops per rank or the datasheet's of the GPU
-- (lwopt/mfu.lua); nil when neither is known (a CPU without --peak-tflops).
local function mfu_of(v, comm, ddp, specs, cfg)
   local peak = v.peak_tflops and v.peak_tflops * 1e12
   if peak == nil and not ddp.host then
      local info = ffi.new("lw_device_info")
      if C.lib.lw_device_get_info(ddp.device, info) == 0 then
         peak = mfu.peak(ffi.string(info.name))
      end
   end
   if peak == nil then return nil end
   return { peak = peak * comm.size, flops_per_token = mfu.flops_per_token(specs,
      { n_layer = v.n_layer, n_embd = v.n_embd, t = v.seq, topk = cfg.topk or 1,
        n_expert = math.max(1, cfg.n_expert or 1) }) }
end

-- The GPT, its routing (rules, or all AdamW with --optimizer adamw), buffers and optimizer,
-- the parameters initialised, and the run table train.run takes, the model bound to it.
local function build_run(v, comm, data, rules)
   local moe = { n_expert = v.n_expert, topk = v.topk, aux_coef = v.aux_coef,
      shared_expert = v.shared_expert }
   -- --ep: EP groups of v.ep consecutive ranks (world rank r: group floor(r / ep), EP rank
   -- r % ep, holding experts [r % ep * n/ep, +n/ep)), expert-DP groups of the ranks with the same
   -- EP rank; the model declares its EP rank's experts, lw.ddp.new averages them over the
   -- expert-DP group
   -- every device communicator made from here on (buffers, TP, EP) is of this kind
   lw.comm.set_device_kind(v.device_comm)
   local g = v.ep > 1 and lw.ep.groups(comm, v.ep, v.n_expert) or nil
   -- --tp: TP groups of v.tp consecutive ranks hold the shards of every layer and see the same
   -- batches; the buffers are data-parallel over the DP group (the ranks of one TP rank)
   local tg = recipe_tp.groups(v, comm)
   local shape = { n_layer = v.n_layer, n_embd = v.n_embd, n_head = v.n_head, seq = v.seq }
   -- biases and an untied head: --init-from a GPT-2 that has them (recipe_init.lua)
   -- --arch: the registry's model (lw.models); LLaMA's parts and untied head are its defaults
   local function gpt_config()
      local c = recipe.gpt_config(shape, v.vocab, v.seq, moe, v.mlp_hidden)
      if v.arch == "gpt" then
         c.bias, c.tied = v.bias or false, v.tied ~= false
      else
         c.tied, c.n_kv_head, c.rope_pairing = v.tied, v.n_kv_head, v.rope_pairing
         -- an hf-llama file's (recipe_init.lua), else LLaMA's defaults
         c.norm_eps, c.rope_base = v.norm_eps, v.rope_base
         -- a nanochat file's window pattern (recipe_init.lua), else the model's default
         c.window_pattern = v.window_pattern
      end
      return c
   end
   local cfg = gpt_config()
   cfg.recompute_gelu, cfg.activations = v.recompute_gelu == "on", v.activations
   local model = lw.models.build(v.arch, cfg, { ep = g, tp = tg })
   -- what a checkpoint records to build the model again (sample, eval): its whole config
   v.model_config = lw.models.config(v.arch, cfg)
   -- nanochat's optimizer groups unless the recipe brings its rules (app/recipe_nanochat.lua)
   if v.arch == "nanochat" and rules == nil then rules = recipe_nanochat.rules(v, v.n_embd) end
   if v.optimizer == "adamw" then rules = { { match = ".", optimizer = "adamw" } } end
   if v.optimizer == "normuon" then rules = recipe.to_normuon(rules or lw.route.default_rules) end
   -- errors name an unmatched parameter; a rule that routes none is warned about over the
   -- whole model (warn_rules), not over this rank's part
   local specs = recipe.with_group_lrs(lw.route(model:parameters(), rules, { warn = false }), v)
   -- expert parameters (in their own buffers) are data-parallel over every rank at --ep 1
   -- (expert_comm nil is comm), over the expert-DP group with --ep
   -- the flags that name a ddp or optim option (recipe_flags.list), and what the run adds
   local ddp = lw.ddp.new(specs, tg and tg.dp_comm or comm, recipe_flags.options(v, "ddp", {
      expert_comm = g and g.expert_comm,
      algorithm = v.mode == "layerwise" and v.shard == "aligned" and v.layout or nil }))
   -- NorMuon's matrices take Muon's --lr, as Muon's do
   local opt = lw.optim.new(ddp, recipe_flags.options(v, "optim", { normuon = { lr = v.lr },
      tp_comm = tg and tg.comm }))
   -- the same values whatever --ep or --tp: drawn over the ep 1, tp 1 model, in its order
   local every = (g or tg) and (function()
      return lw.models.specs(v.arch, gpt_config())
   end)() or nil
   local entry = lw.models.get(v.arch)
   init_params(model, ddp, v.seed, v.n_layer, every, tg,
      entry.init and function(spec) return entry.init(spec, v.model_config) end)
   -- full_specs: the whole model's parameters, of which --ep and --tp give each rank a part
   local run = { ep = g, tp = tg, dp_comm = tg and tg.dp_comm, full_specs = every, rules = rules,
      comm = comm, model = model, ddp = ddp, opt = opt, data = data, steps = v.steps,
      batch = v.batch, seq = v.seq, accum = v.accum, seed = v.seed,
      base_lr = v.optimizer == "adamw" and v.adamw_lr or v.lr, schedule = v.plan,
      eval_every = v.eval_every, eval_max = v.eval_max,
      log = v.log, quiet = v.quiet, progress = v.progress, stop_after = v.stop_after,
      max_skips = v.max_skips, qk_clip = v.qk_clip, max_logit = v.log ~= nil,
      sample_every = v.sample > 0 and v.sample_every or 0,
      sample_collective = v.zero == 3 or v.tp > 1 or v.ep > 1,
      sample = function(r) return recipe_report.sample_text(r, v) end }
   run.mfu = mfu_of(v, comm, ddp, every or specs, cfg)
   model:bind(ddp, train.hooks(run))
   return run
end

-- A routing rule that routes none of the whole model's parameters: said on stderr (rank 0),
-- even with --quiet, as lw.route says it; a warning, since a generic list may not fit.
local function warn_rules(run, say)
   for _, text in ipairs(lw.route.unused(run.full_specs or run.model:parameters(), run.rules)) do
      say("warning: routing " .. text, io.stderr)
   end
end

-- No output may write over an input or another output: rank 0 compares their real paths (the
-- inputs include the checkpoint resumed); then a non-empty --log is refused without --overwrite
-- or --resume (a log is protected as checkpoints are; a resumed run appends to it), still before
-- anything is written. Every rank agrees. Collective.
local function check_paths(run, v, data)
   local ok, err = pcall(function()
      if run.comm.rank ~= 0 then return end
      local why = recipe_paths.check(v, data, run.checkpoint and run.checkpoint.resumed_from)
      if why then errors.raise(why) end
      local f = v.log and not v.resume and not v.overwrite and io.open(v.log, "rb")
      local size = f and f:seek("end") or 0
      if f then f:close() end
      if size > 0 then
         errors.fail(nil, "--log %s already holds a log (%d bytes): add --overwrite to replace "
            .. "it, or choose another file", v.log, size)
      end
   end)
   run.comm:agree(ok, err)
end

-- With --init-from: the weights read into the buffers and said in one line, unless the run
-- resumed a checkpoint, whose weights take precedence (also said). Collective.
local function apply_init_from(run, v, say)
   if not v.init_from then return end
   if run.start_step then
      say(("--init-from %s not used: the run resumed from %s, which continues it (--init-from "
         .. "starts a run; a resumed run takes its checkpoint's weights)"):format(v.init_from,
         run.checkpoint.resumed_from))
      return
   end
   say(init_from.load(v.init_from, { ddp = run.ddp, comm = run.comm, full_specs = run.full_specs,
      tp = run.tp, cfg = run.model.cfg, vocab = v.vocab }))
end

-- Trains from the first step to run (1, or the one after the checkpoint resumed) to the last
-- (--steps or --stop-after); a resumed run already past it says so and trains nothing. While it
-- trains, SIGTERM, SIGUSR1 and Ctrl-C ask it to stop at a step's end (train.run), which must
-- come within --timeout; before and after, they end the process as usual (there is no step to
-- finish, and a failing job must end when mpirun kills it).
local function train_steps(run, v, say)
   local first, last = run.start_step or 1, math.min(v.steps, v.stop_after or v.steps)
   if first > last then
      say(("nothing to train: the checkpoint is at step %d and the run ends at step %d (%s)")
         :format(first - 1, last, last == v.steps and "--steps" or "--stop-after"))
      return {}, { diverged = false }
   end
   C.check(C.lib.lw_stop_watch(run.comm:timeout(), recipe.EXIT_STOPPED), "recipe")
   local records, ended = train.run(run)
   C.lib.lw_stop_unwatch()
   return records, ended
end

-- Runs the recipe. argv: the script's arguments; rules: routing rules (nil: the defaults, or
-- all AdamW with --optimizer adamw); script: its path, for messages; own: what the recipe adds,
-- { presets = { name = { n_layer = 2, ... } } } (presets.with), --preset's choices beside the
-- library's. Returns the step records; a run that must report failure after its work (it
-- diverged, an output failed) ends the process with that status instead (recipe.EXIT_DIVERGED,
-- 1).
function recipe.main(argv, rules, script, own)
   local started = C.lib.lw_wall_clock()
   local v = parse_flags(argv, script, own and own.presets)
   if v == nil then return {} end -- --help
   check_flags(v)
   local shaped = recipe_init.adopt(v)
   local comm, say = start_comm(v)
   if shaped then say(shaped) end
   local bad = lw.ep.check(v.ep, comm.size, v.n_expert) or recipe_tp.check_world(v, comm.size)
   if bad then lw.comm.fail("--" .. bad, recipe.EXIT_USAGE) end
   bad = recipe_batch.plan(v, comm.size / v.tp)
   if bad then lw.comm.fail(bad, recipe.EXIT_USAGE) end
   local lock = check_outputs(comm, v)
   local data, path = load_data(v, script)
   local run = build_run(v, comm, data, rules)
   setup_checkpoints(run, v, data, say)
   check_paths(run, v, data)
   apply_init_from(run, v, say)
   announce(run, v, data, path, say)
   recipe_order.setup(run, v, data, say) -- --data-order, from the checkpoint's position
   warn_schedule(v, say)
   warn_rules(run, say)
   if v.log then -- collective
      run.log_config = recipe_log.config(run, v, data, path, v.flag_list, started,
         lw.arch.numel(run.full_specs or run.ddp.specs))
   end
   local records, ended = train_steps(run, v, say)
   local status = finish(run, v, records, ended, say, path)
   if lock then lock.release() end
   if status ~= 0 then lw.comm.exit(status) end
   return records
end

return recipe
