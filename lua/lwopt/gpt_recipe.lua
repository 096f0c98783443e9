-- gpt_recipe.lua: the body of recipes/gpt_small.lua (and recipes that change its routing): parse
-- the flags, build the GPT, its buffers and optimizer, train on a byte-level corpus, then report
-- the final validation loss, plot the loss curve and print a sample.
local ffi = require("ffi")
local lw = require("lwopt")
local flags = require("lwopt.flags")
local train = require("lwopt.train")
local data_mod = require("lwopt.data")
local safetensors = require("lwopt.safetensors")

local recipe = {}

recipe.presets = {
   tiny = { n_layer = 4, n_embd = 64, n_head = 4, seq = 32, batch = 8, steps = 50, lr = 3e-3,
            warmup = 10, eval_every = 25 },
   small = { n_layer = 6, n_embd = 256, n_head = 8, seq = 128, batch = 8, steps = 500, lr = 3e-3,
             warmup = 50, eval_every = 100 },
   -- small, 4x wider: for measuring sharding where matrices dominate
   wide = { n_layer = 6, n_embd = 1024, n_head = 16, seq = 128, batch = 8, steps = 500, lr = 1e-3,
            warmup = 50, eval_every = 100 },
}

recipe.flags = {
   { "preset", { "tiny", "small", "wide" }, "small", "model and schedule size" },
   { "steps", "int", nil, "optimizer steps (preset's by default)" },
   { "optimizer", { "muon", "adamw" }, "muon", "muon for matrices + adamw, or adamw for all" },
   { "mode", { "layerwise", "legacy", "replicated" }, "layerwise", "how the optimizer is split" },
   { "layout", { "cost", "lpt", "size_matching" }, "cost", "layout of the Muon buffers" },
   { "zero", "int", 1, "1: shard optimizer state; 2: and gradients; 3: and parameters" },
   { "shard", { "aligned", "rows" }, "aligned", "aligned: each rank owns whole matrices; rows: "
     .. "every matrix split by rows (row-sharded FSDP, for comparison; needs --zero 3)" },
   { "overlap", { "on", "off" }, "on", "overlap communication with backward and forward" },
   { "device", { "cpu", "cuda" }, "cpu", "where to train" },
   { "batch", "int", nil, "sequences per rank per micro-step" },
   { "seq", "int", nil, "sequence length" },
   { "accum", "int", 1, "micro-steps per optimizer step" },
   { "seed", "int", 1337, "seed of initialisation and data order" },
   { "lr", "number", nil, "peak learning rate" },
   { "warmup", "int", nil, "warmup steps" },
   { "clip", "number", 1.0, "gradient norm clip (0: none)" },
   { "bucket-size", "size", nil, "bucket size in elements (default: one bucket per buffer)" },
   { "eval-every", "int", nil, "steps between validation evaluations" },
   { "eval-max", "int", 64, "validation sequences per evaluation" },
   { "data", "string", nil, "text file (default: the KJV corpus in data/)" },
   { "log", "string", nil, "JSON lines per step; the loss curve PNG goes next to it" },
   { "save-params", "string", nil, "write the final parameters as safetensors" },
   { "ckpt-dir", "string", nil, "save checkpoints into this directory" },
   { "ckpt-every", "int", 0, "steps between checkpoints (0: only at the end)" },
   { "keep", "int", 3, "checkpoints kept (the newest)" },
   { "resume", "bool", false, "continue from the latest checkpoint in --ckpt-dir, if any" },
   { "stop-after", "int", nil, "stop after this step (checkpointed with --ckpt-dir); the "
     .. "schedule still spans --steps" },
   { "sample", "int", 200, "characters to generate at the end (0: none)" },
   { "prompt", "string", "And God said", "prompt for the sample" },
   { "quiet", "bool", false, "no progress lines" },
   { "progress", { "auto", "redraw", "lines" }, "auto",
     "redraw the progress line in place, or a line per step (auto: redraw on a terminal, not "
     .. "under mpirun, whose ranks always see one)" },
   { "help", "bool", false, "this text" },
}

local function usage(script)
   return ("usage: [mpirun -np N] luajit %s [flags]\n"):format(script) .. flags.usage(recipe.flags)
end

-- The next state of a 31-bit linear congruential generator: seeded, the same on every rank.
local function lcg(state) return (state * 1103515245 + 12345) % 2147483648 end

-- Seeded parameter initialisation, the same on every rank (GPT-2's: normal(0, 0.02), residual
-- projections scaled by 1/sqrt(2 n_layer), norm gains 1, biases 0), one parameter at a time in
-- definition order (collective at ZeRO-3, where each is written into its gathered group).
local function init_params(model, ddp, seed, n_layer)
   local state = seed
   local function uniform()
      state = lcg(state)
      return (state + 0.5) / 2147483648
   end
   local function normal() -- Box-Muller
      return math.sqrt(-2 * math.log(uniform())) * math.cos(2 * math.pi * uniform())
   end
   for _, spec in ipairs(model:parameters()) do
      ddp:with_param(spec.name, function(p)
         if spec.role == "norm" then
            p:fill(1)
         elseif spec.role == "bias" then
            p:fill(0)
         else
            local std = 0.02
            if spec.name:match("proj%.weight$") then std = 0.02 / math.sqrt(2 * n_layer) end
            for i = 0, p.numel - 1 do p.data[i] = std * normal() end
         end
      end)
   end
end

-- Flag combinations that cannot work, refused before any work (every rank sees the same flags).
local function check_flags(v)
   if v.zero < 1 or v.zero > 3 then error(("--zero must be 1, 2 or 3, got %d"):format(v.zero), 0) end
   if v.shard == "rows" and v.zero ~= 3 then
      error("--shard rows is row-sharded FSDP: it needs --zero 3", 0)
   end
   if v.zero > 1 and v.mode ~= "layerwise" then
      error(("--zero %d shards %s across ranks; --mode %s keeps them whole (use --mode "
         .. "layerwise)"):format(v.zero, v.zero == 3 and "gradients and parameters" or "gradients",
         v.mode), 0)
   end
end

-- Bytes per rank, printed as a table at the end of a run.
local function memory_table(by_rank)
   local lines = { "memory per rank (MiB): rank  params  grads  optimizer  activations  peak" }
   for r = 1, #by_rank.params do
      lines[#lines + 1] = ("  %4d %8.2f %6.2f %10.2f %12.2f %6.2f"):format(r - 1,
         by_rank.params[r], by_rank.grads[r], by_rank.optimizer[r], by_rank.activations[r],
         by_rank.peak[r])
   end
   return table.concat(lines, "\n")
end

local function plot(log_path)
   local png = log_path:gsub("%.jsonl$", "") .. ".png"
   local dat = png:gsub("%.png$", "") .. ".dat"
   local f = assert(io.open(dat, "w"))
   for line in io.lines(log_path) do
      local step = line:match('"step":(%d+)')
      local loss = line:match('"loss":([%d%.eE%-]+)')
      local val = line:match('"val_loss":([%d%.eE%-]+)') or "NaN"
      f:write(step, " ", loss, " ", val, "\n")
   end
   f:close()
   local script = ("set terminal pngcairo size 800,480; set output '%s'; set xlabel 'step'; "
      .. "set ylabel 'loss (nats/byte)'; set grid; set key top right; "
      .. "plot '%s' using 1:2 with lines title 'train', '' using 1:3 with linespoints pt 7 "
      .. "title 'validation'"):format(png, dat)
   local ok = os.execute("gnuplot -e \"" .. script .. "\" 2>/dev/null")
   os.remove(dat)
   return (ok == 0 or ok == true) and png or nil
end

-- Sampling at temperature 0.8 over the model's next-byte distribution, among the bytes that
-- occur in the training text (an untrained byte's small probability is noise, not text).
local function sample(model, data, prompt, chars, seq, seed)
   local seen = {}
   for i = 0, data.n_train - 1 do seen[data.bytes[i]] = true end
   local tokens = ffi.new("int32_t[?]", seq)
   local out = { prompt }
   local context = { prompt:byte(1, -1) }
   local state = seed
   for _ = 1, chars do
      local start = math.max(1, #context - seq + 1)
      local len = #context - start + 1
      for i = 0, seq - 1 do tokens[i] = i < len and context[start + i] or 0 end
      model:forward(tokens, nil, 1, seq)
      local p = model:next_probs(len - 1)
      local weights, total = {}, 0
      for v = 0, 255 do
         local w = seen[v] and p[v] ^ (1 / 0.8) or 0
         weights[v] = w
         total = total + w
      end
      state = lcg(state)
      local r, pick = state / 2147483648 * total, 255
      for v = 0, 255 do
         r = r - weights[v]
         if r <= 0 then
            pick = v
            break
         end
      end
      context[#context + 1] = pick
      out[#out + 1] = string.char(pick)
   end
   return table.concat(out)
end

-- Runs the recipe. argv: the script's arguments; rules: routing rules (nil: the defaults, or
-- all AdamW with --optimizer adamw); script: its path, for messages.
function recipe.main(argv, rules, script)
   local v, positional = flags.parse(argv, recipe.flags)
   if v == nil or #positional > 0 then
      io.stderr:write(v == nil and positional or ("unexpected argument '" .. positional[1] .. "'"),
         "\n", usage(script), "\n")
      os.exit(2)
   end
   if v.help then
      print(usage(script))
      return
   end
   check_flags(v)
   if v.device == "cuda" and not lw.has_cuda() then
      error("--device cuda: this build has no CUDA backend (liblwopt_cuda.so); use --device cpu", 0)
   end
   local preset = recipe.presets[v.preset]
   local steps, b = v.steps or preset.steps, v.batch or preset.batch
   local t = v.seq or preset.seq
   for _, check in ipairs({ { "steps", steps }, { "batch", b }, { "seq", t }, { "accum", v.accum } }) do
      if check[2] < 1 then error(("--%s must be >= 1, got %d"):format(check[1], check[2]), 0) end
   end
   local comm = lw.comm.init()
   local here = script:match("^(.*)/[^/]*$") or "."
   local path = v.data or (here .. "/../data/kjv.txt")
   local data = data_mod.load(path, { seq_len = t, hint = v.data == nil and
      ". Prepare the default corpus with `make data` (needs Debian's bible-kjv package)" or "" })

   local model = lw.nn.GPT.new{ n_layer = preset.n_layer, n_embd = preset.n_embd,
      n_head = preset.n_head, vocab = 256, seq_len = t, tied = true }
   if v.optimizer == "adamw" then rules = { { match = ".", optimizer = "adamw" } } end
   local specs = lw.route(model:parameters(), rules) -- errors name an unmatched parameter
   local ddp = lw.ddp.new(specs, comm, { mode = v.mode,
      algorithm = v.mode == "layerwise" and v.shard == "aligned" and v.layout or nil,
      bucket_size = v.bucket_size, overlap = v.overlap == "on", zero = v.zero, shard = v.shard })
   local lr = v.lr or preset.lr
   local opt = lw.optim.new(ddp, { lr = lr, weight_decay = 0.1, clip = v.clip,
      adamw = { beta1 = 0.9, beta2 = 0.95 } })
   init_params(model, ddp, v.seed, preset.n_layer)
   local run = { comm = comm, model = model, ddp = ddp, opt = opt, data = data, steps = steps,
      batch = b, seq = t, accum = v.accum, seed = v.seed, base_lr = lr,
      lr_warmup = v.warmup or preset.warmup, lr_min_ratio = 0.1,
      eval_every = v.eval_every or preset.eval_every, eval_max = v.eval_max, log = v.log,
      quiet = v.quiet, progress = v.progress, stop_after = v.stop_after }
   model:bind(ddp, train.hooks(run))
   if v.resume and not v.ckpt_dir then error("--resume needs --ckpt-dir", 0) end
   if v.keep < 1 then error(("--keep must be >= 1, got %d"):format(v.keep), 0) end
   if v.ckpt_dir then
      run.checkpoint = { dir = v.ckpt_dir, every = v.ckpt_every, keep = v.keep,
         extra = { preset = v.preset, seq = t, batch = b, accum = v.accum, seed = v.seed,
                   lr = lr, steps = steps, optimizer = v.optimizer, zero = v.zero,
                   shard = v.shard } }
      local latest = v.resume and require("lwopt.checkpoint").latest(v.ckpt_dir)
      if latest then
         local m = require("lwopt.checkpoint").load(latest, { ddp = ddp, opt = opt })
         run.start_step = m.step + 1
         if comm.rank == 0 and not v.quiet then
            print(("resuming from %s (step %d, saved on %d rank%s)"):format(latest, m.step,
               m.ranks, m.ranks == 1 and "" or "s"))
         end
      end
   end
   if comm.rank == 0 and not v.quiet then
      print(("lwopt %s: GPT %d layers x %d, %d heads, %.2fM parameters; %s/%s ZeRO-%d%s on %d "
         .. "rank%s, global batch %d x %d bytes; %s (%d bytes)"):format(lw.version,
         preset.n_layer, preset.n_embd, preset.n_head, lw.arch.numel(specs) / 1e6, v.optimizer,
         v.mode, v.zero, v.shard == "rows" and " row-sharded" or "", comm.size,
         comm.size == 1 and "" or "s", b * v.accum * comm.size, t, path, data.n))
   end
   if (run.start_step or 1) > steps then
      if comm.rank == 0 then print(("nothing to do: the checkpoint is at step %d of %d"):format(
         run.start_step - 1, steps)) end
      return {}
   end
   local records = train.run(run)
   local final = records[#records]
   ddp:finish_param_sync()
   local memory = train.memory_by_rank(run) -- collective
   if comm.rank == 0 and not v.quiet then print(memory_table(memory)) end
   if comm.rank == 0 then
      print(("final validation loss %.4f (%.3f bits/byte)"):format(final.val_loss,
         final.val_loss / math.log(2)))
      if v.log then
         local png = plot(v.log)
         if png then print("loss curve: " .. png) end
      end
   end
   if v.save_params then
      local tensors = ddp:params_on(0) -- collective at ZeRO-3
      if comm.rank == 0 then safetensors.write(v.save_params, tensors) end
   end
   -- at ZeRO-3 a forward pass is collective: every rank samples (the same text), rank 0 prints
   if v.sample > 0 and (comm.rank == 0 or v.zero == 3) then
      local text = sample(model, data, v.prompt, v.sample, t, v.seed)
      if comm.rank == 0 then print("sample:\n" .. text) end
   end
   return records
end

return recipe
