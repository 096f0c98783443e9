-- bench/gpt2_gpu.lua: GPT-2 124M (12 layers x 768, 12 heads, sequence 1024, vocabulary 50257
-- padded to 50304, batch 8; or --preset gpt2-medium, GPT-2 350M, and --batch N) on one GPU
-- through recipes/gpt_small.lua --preset gpt2 --device cuda:
-- tokens/s, forward / backward / optimizer ms, model TFLOP/s and MFU, and GPU memory, for AdamW
-- and Muon (bf16 Newton-Schulz) with the model's GEMMs in tf32 (fp32 activations) and in bf16
-- (bf16 operands with fp32 sums, and the recipe's GPU default of bf16 activations: the GEMMs'
-- inputs and the outputs that feed the attention and GELU, their gradients and the logits; the
-- residual stream fp32), and AdamW with exact fp32 GEMMs as the baseline, on fp32 parameters;
-- the bf16 pair also on bf16 parameters; then, for tf32 and bf16, Muon's cost over AdamW against
-- the Newton-Schulz share of the step's FLOPs (goal: at most 1.25x it). The seven configurations
-- run interleaved, `repeats` times, each keeping its best run (highest tokens/s); a run's figures
-- are the mean over steps 6..N of its JSON log. The table has the columns of
-- bench/peers/torch_gpt2.py, the PyTorch peer on the same GPU and shapes.
-- Usage: bin/lwopt run bench/gpt2_gpu.lua [steps] [repeats] [--preset gpt2|gpt2-medium]
--        [--batch N] [--quick]   (from the repo root; 30 2 gpt2 8; --quick: only the bf16
--        parameter pair, the recipe's GPU default, and Muon's cost at bf16)
--        bin/lwopt run bench/gpt2_gpu.lua --write-shard PATH   (only the token shard the runs
--        train on, for a profiler to run the recipe on: scripts/gpu-run.sh)
-- Exit 77 (skipped) when `bin/lwopt device cuda` finds no usable GPU; 1 when a run fails.
local ffi = require("ffi")
local bit = require("bit")
local arch = require("lwopt.arch")
local route = require("lwopt.route")

local SCRIPT = "bench/gpt2_gpu.lua"
local USAGE = ("usage: bin/lwopt run %s [steps] [repeats] [--preset gpt2|gpt2-medium] "
   .. "[--batch N] [--quick]\n"):format(SCRIPT)
-- A usage error ends the script with exit 2.
local function usage_error(text)
   io.stderr:write(("%s: %s\n%s"):format(SCRIPT, text, USAGE))
   os.exit(2)
end
-- v as a positive integer, or the usage error naming what it is.
local function count(v, what)
   local n = tonumber(v)
   if n == nil or n < 1 or n ~= math.floor(n) then
      usage_error(("%s must be a positive integer, got '%s'"):format(what, tostring(v)))
   end
   return n
end
-- The arguments: up to two positional counts, then options (--write-shard PATH alone writes the
-- token shard the runs train on, for a profiler: scripts/gpu-run.sh).
local opts, positional, shard_only = { preset = "gpt2", batch = 8, quick = false }, {}, nil
do
   local i = 1
   while arg[i] ~= nil do
      local a = arg[i]
      if a == "--write-shard" or a == "--preset" or a == "--batch" then
         if arg[i + 1] == nil then usage_error(a .. " needs a value") end
         if a == "--write-shard" then shard_only = arg[i + 1]
         elseif a == "--preset" then opts.preset = arg[i + 1]
         else opts.batch = count(arg[i + 1], "--batch") end
         i = i + 2
      elseif a == "--quick" then
         opts.quick, i = true, i + 1
      elseif a:sub(1, 2) == "--" then
         usage_error(("unknown option '%s'"):format(a))
      else
         positional[#positional + 1], i = a, i + 1
      end
   end
end
if #positional > 2 then usage_error("at most two counts, steps and repeats") end
local steps = positional[1] and count(positional[1], "steps") or 30
local repeats = positional[2] and count(positional[2], "repeats") or 2
local MODELS = { gpt2 = "GPT-2 124M", ["gpt2-medium"] = "GPT-2 350M" }
if MODELS[opts.preset] == nil then
   usage_error(("--preset must be gpt2 or gpt2-medium, got '%s'"):format(opts.preset))
end
local preset = require("lwopt.presets").presets[opts.preset]
local L, C, H, T, B = preset.n_layer, preset.n_embd, preset.n_head, preset.seq, opts.batch
local VOCAB_DATA, VOCAB = 50257, 50304     -- the tokenizer's, and the model's padded table
local TOKENS_PER_STEP = B * T
-- Steps left out of the means: the first ones allocate, plan GEMMs and warm the clocks.
local SKIP = steps > 5 and 5 or 0

-- Runs a shell command; returns its exit status (LuaJIT's os.execute gives system()'s raw
-- status, or true / false and the code where built with Lua 5.2 compatibility).
local function sh(cmd)
   local a, _, code = os.execute(cmd)
   if type(code) == "number" then return code end
   if a == true then return 0 end
   if type(a) == "number" then return a >= 256 and math.floor(a / 256) or a end
   return 1
end

local function slurp(path)
   local f = io.open(path, "rb")
   if f == nil then return "" end
   local text = f:read("*a")
   f:close()
   return text
end

-- The last n lines of text.
local function tail(text, n)
   local lines = {}
   for line in text:gmatch("[^\n]*") do lines[#lines + 1] = line end
   while #lines > 0 and lines[#lines] == "" do lines[#lines] = nil end
   local first = math.max(1, #lines - n + 1)
   return table.concat(lines, "\n", first, #lines)
end

-- The GPU, as `bin/lwopt device cuda` describes it: its lines and its name, or ends the script
-- with exit 77 and the reason. A subprocess, not lw.device_info here: a CUDA context in this
-- process would sit on the GPU during every run and count in their memory in use.
local function gpu()
   local pipe = assert(io.popen("bin/lwopt device cuda 2>&1; echo \"exit $?\""))
   local text = pipe:read("*a")
   pipe:close()
   local status = tonumber(text:match("exit (%d+)%s*$"))
   text = text:gsub("exit %d+%s*$", "")
   if status ~= 0 then
      local why = text:gsub("^lwopt device: ", ""):gsub("%s+$", "")
      print(("%s: skipped: no GPU to run on: %s"):format(SCRIPT, why ~= "" and why
         or "bin/lwopt device cuda failed without saying why"))
      os.exit(77)
   end
   return text, text:match("\nname%s+([^\n]+)") or text:match("^name%s+([^\n]+)") or "?"
end

-- Dense bf16 tensor-core peak in TFLOP/s from NVIDIA's datasheets (without sparsity), by the
-- name the driver gives; nil for a GPU not listed here. Kept equal to the table in
-- bench/peers/torch_gpt2.py. NVL boards (lower clocks than SXM) and GH200 are not listed.
local function peak_tflops(name)
   if name:find("H100 PCIe", 1, true) then return 756, "H100 PCIe" end
   if name:find("NVL", 1, true) or name:find("GH200", 1, true) then return nil end
   if name:find("H100", 1, true) then return 989, "H100 SXM" end
   if name:find("H200", 1, true) then return 989, "H200" end
   if name:find("A100", 1, true) then return 312, "A100" end
   return nil
end

-- A token shard in the llm.c / modded-nanogpt format: 256 little-endian int32 (magic 20240520,
-- version 1, token count, zeros), then the tokens as uint16. The tokens are seeded uniform
-- random below VOCAB_DATA: throughput does not depend on which tokens a batch holds (every
-- kernel does the same work for any token ids), only on their count.
local function write_shard(path, n, seed)
   assert(ffi.abi("le"), "the shard format is little-endian; this machine is not")
   local header = ffi.new("int32_t[256]")
   header[0], header[1], header[2] = 20240520, 1, n
   local tokens = ffi.new("uint16_t[?]", n)
   local x = seed -- xorshift32: exact in LuaJIT's 32-bit bit operations
   for i = 0, n - 1 do
      x = bit.bxor(x, bit.lshift(x, 13))
      x = bit.bxor(x, bit.rshift(x, 17))
      x = bit.bxor(x, bit.lshift(x, 5))
      tokens[i] = bit.band(x, 0x7fffffff) % VOCAB_DATA
   end
   local f = assert(io.open(path, "wb"))
   assert(f:write(ffi.string(header, 1024)))
   assert(f:write(ffi.string(tokens, 2 * n)))
   assert(f:close())
   f = assert(io.open(path, "rb"))
   local size = f:seek("end")
   f:close()
   assert(size == 1024 + 2 * n, ("%s: %d bytes written, %d expected"):format(path, size,
      1024 + 2 * n))
end

-- Model FLOPs per token, PaLM's / nanoGPT's estimate: 6 N (forward + backward through every
-- parameter) + 12 L H Q T (the attention scores and their weighted sum, forward + backward,
-- over the full T x T square), N = all parameters with the tied embedding counted once,
-- the position table included (nanoGPT's estimate_mfu leaves that out: about 0.5% fewer).
local specs = arch.gpt({ n_layer = L, n_embd = C, n_head = H, vocab = VOCAB, seq_len = T })
local N = arch.numel(specs)
local FLOPS_PER_TOKEN = 6 * N + 12 * L * H * (C / H) * T
local MODEL_FLOPS_PER_STEP = FLOPS_PER_TOKEN * TOKENS_PER_STEP
-- Newton-Schulz FLOPs per step over the matrices the default rules route to Muon (per layer
-- qkv 2304x768, proj 768x768, fc 3072x768, fc proj 768x3072), full GEMMs, 5 steps: per step
-- 2 p^2 q for X X^T, 2 p^3 for A A, 2 p^2 q for B X (p = min, q = max).
local NS_FLOPS, n_muon = 0, 0
for _, s in ipairs(route(specs)) do
   if s.optimizer == "muon" then
      local p, q = math.min(s.shape[1], s.shape[2]), math.max(s.shape[1], s.shape[2])
      NS_FLOPS = NS_FLOPS + 5 * (4 * p * p * q + 2 * p * p * p)
      n_muon = n_muon + 1
   end
end
local NS_SHARE = NS_FLOPS / (MODEL_FLOPS_PER_STEP + NS_FLOPS)

-- AdamW in fp32 is the baseline (exact GEMMs on CUDA cores); Muon's cost is taken per precision
-- against AdamW's in the same one (MUON_COST_PAIRS). Parameters fp32 (as the runs before bf16
-- parameters were measured), and Muon and AdamW with bf16 GEMMs also on bf16 parameters with
-- fp32 master weights (the recipe's default on a GPU).
local CONFIGS = {
   { optimizer = "adamw", matmul = "fp32", params = "fp32" },
   { optimizer = "adamw", matmul = "tf32", params = "fp32" },
   { optimizer = "muon", matmul = "tf32", params = "fp32" },
   { optimizer = "adamw", matmul = "bf16", params = "fp32" },
   { optimizer = "muon", matmul = "bf16", params = "fp32" },
   { optimizer = "adamw", matmul = "bf16", params = "bf16" },
   { optimizer = "muon", matmul = "bf16", params = "bf16" },
}
-- --quick: the GPU default's pair alone (a run at another batch or model size)
if opts.quick then
   CONFIGS = { CONFIGS[6], CONFIGS[7] }
end
-- Muon's cost over AdamW, per pair of configurations in the run: the GEMMs' precision and the
-- parameters' dtype of each pair
local MUON_COST_PAIRS = opts.quick and { { "bf16", "bf16" } }
   or { { "tf32", "fp32" }, { "bf16", "fp32" } }
-- (a model or batch other than GPT-2 124M at batch 8 is named in the label, so that a report
-- reading several runs' tables keeps them apart)
local SHAPE = (opts.preset ~= "gpt2" or B ~= 8)
   and ("(%s, batch %d) "):format(MODELS[opts.preset], B) or ""
local function label(c)
   return ("lwopt %s%s, %s GEMMs%s"):format(SHAPE,
      c.optimizer == "muon" and "muon (bf16 NS)" or "adamw", c.matmul,
      c.params == "bf16" and ", bf16 params" or "")
end
-- The key a configuration's best run is kept under.
local function key_of(c) return c.optimizer .. c.matmul .. (c.params == "bf16" and "p16" or "") end

local dir -- the run's temp directory, with the shard, logs and outputs

-- Ends the script with exit 1 after a failed run: its command and the tail of its output.
local function fail(what, cmd, out)
   io.stderr:write(("%s: %s\ncommand: %s\noutput (last 40 lines):\n%s\n"):format(SCRIPT, what,
      cmd, tail(slurp(out), 40)))
   sh("rm -rf '" .. dir .. "'")
   os.exit(1)
end

-- One run of the recipe: the means over steps SKIP+1..steps of its log (tokens/s as total
-- tokens over total time, so the same definition as the peer's), and the maxima over the run
-- of the GPU's memory in use and of lwopt's own peak (parameters, gradients, optimizer state
-- and activations).
local function run(c, shard, k)
   local json = require("lwopt.json")
   local name = ("%s-%s-%s-%d"):format(c.optimizer, c.matmul, c.params, k)
   local log, out = ("%s/%s.jsonl"):format(dir, name), ("%s/%s.out"):format(dir, name)
   local cmd = ("bin/lwopt run recipes/gpt_small.lua --device cuda --preset %s --data %s "
      .. "--vocab %d --batch %d --seq %d --optimizer %s --matmul %s%s --param-dtype %s "
      .. "--steps %d --eval-every 0 --eval-max 1 --sample 0 --quiet --log %s"):format(opts.preset,
      shard, VOCAB_DATA, B, T, c.optimizer, c.matmul,
      c.optimizer == "muon" and " --muon-precision bf16" or "", c.params, steps, log)
   local status = sh(cmd .. " > " .. out .. " 2>&1")
   local text = slurp(out)
   if status ~= 0 then
      -- The recipe draws the loss curve with gnuplot at the end, and a GPU machine may have
      -- none: a run whose only failure is that still trained, and its log is checked below.
      local others = text:gsub("failed: loss curve:[^\n]*", "")
      if status ~= 1 or others:find("failed:", 1, true) or not text:find("failed: loss curve:",
         1, true) then
         fail(("the recipe exited %d"):format(status), cmd, out)
      end
   end
   local r = { time = 0, fwd = 0, bwd = 0, opt = 0, muon = 0, n = 0, records = 0 }
   local log_file = io.open(log)
   if log_file == nil then fail("it wrote no log", cmd, out) end
   log_file:close()
   local lines = {}
   for line in io.lines(log) do
      -- the configuration record that opens the log is not a step's
      if not line:find('"kind":"config"', 1, true) then lines[#lines + 1] = line end
   end
   for _, line in ipairs(lines) do
      local ok, rec = pcall(json.decode, line)
      if not ok or type(rec) ~= "table" or type(rec.step) ~= "number" then
         fail("its log has a line that is not a step record: " .. line:sub(1, 200), cmd, out)
      end
      r.records = r.records + 1
      local mem = rec.memory_mb
      if type(mem) == "table" then
         if type(mem.gpu) == "table" and type(mem.gpu[1]) == "number" then
            r.gpu_mb = math.max(r.gpu_mb or 0, mem.gpu[1])
         end
         if type(mem.peak) == "table" and type(mem.peak[1]) == "number" then
            r.peak_mb = math.max(r.peak_mb or 0, mem.peak[1])
         end
      end
      if rec.step > SKIP then
         if type(rec.tokens_per_s) ~= "number" or rec.tokens_per_s <= 0 then
            fail(("step %d has no tokens_per_s"):format(rec.step), cmd, out)
         end
         r.n = r.n + 1
         r.time = r.time + TOKENS_PER_STEP / rec.tokens_per_s
         local t = rec.time_ms or {}
         for _, key in ipairs({ "fwd", "bwd", "opt", "muon" }) do
            r[key] = r[key] + (tonumber(t[key]) or 0)
         end
      end
   end
   if r.records ~= steps or r.n == 0 then
      fail(("its log has %d step records, %d expected"):format(r.records, steps), cmd, out)
   end
   os.remove(log)
   os.remove(out)
   os.remove((log:gsub("%.jsonl$", ".png")))
   r.tps = r.n * TOKENS_PER_STEP / r.time
   for _, key in ipairs({ "fwd", "bwd", "opt", "muon" }) do r[key] = r[key] / r.n end
   return r
end

local function mib(v) return v and ("%.0f"):format(v) or "-" end

-- main
if shard_only then
   write_shard(shard_only, 2 ^ 22, 20240520)
   os.exit(0)
end
local recipe_file = io.open("recipes/gpt_small.lua")
if recipe_file then recipe_file:close() else
   io.stderr:write(SCRIPT .. ": run it from the repository root (recipes/gpt_small.lua not "
      .. "found)\n")
   os.exit(2)
end
local device_text, gpu_name = gpu()
local peak, peak_name = peak_tflops(gpu_name)

dir = os.tmpname()
os.remove(dir)
assert(sh("mkdir -p " .. dir) == 0, "cannot create " .. dir)
local shard = dir .. "/tokens.bin"
write_shard(shard, 2 ^ 22, 20240520)

io.write((device_text:gsub("%s+$", "")), "\n\n")
print(("%s: %d parameters (tied embedding once, position table included), batch %d x "
   .. "%d = %d tokens per step"):format(MODELS[opts.preset], N, B, T, TOKENS_PER_STEP))
print(("model FLOPs per token 6 N + 12 L H Q T = %.4f GFLOP; per step %.3f TFLOP")
   :format(FLOPS_PER_TOKEN / 1e9, MODEL_FLOPS_PER_STEP / 1e12))
print(("Newton-Schulz per step (%d Muon matrices, 5 steps, full GEMMs) %.3f TFLOP: %.1f%% of "
   .. "the step's FLOPs"):format(n_muon, NS_FLOPS / 1e12, 100 * NS_SHARE))
print(peak and ("MFU against the %s's dense bf16 peak, %d TFLOP/s"):format(peak_name, peak)
   or ("MFU: no peak known for %q, TFLOP/s only"):format(gpu_name))
print(("best of %d interleaved runs of %d steps each; means over steps %d-%d\n"):format(repeats,
   steps, SKIP + 1, steps))
io.stdout:flush()

local best = {}
for k = 1, repeats do
   for _, c in ipairs(CONFIGS) do
      local r = run(c, shard, k)
      print(("run %d/%d, %s: %.0f tokens/s"):format(k, repeats, label(c), r.tps))
      io.stdout:flush()
      local key = key_of(c)
      if best[key] == nil or r.tps > best[key].tps then best[key] = r end
   end
end
sh("rm -rf '" .. dir .. "'") -- the shard; the runs removed their own files
print()

print("| configuration | tokens/s | step ms | fwd ms | bwd ms | opt ms | model TFLOP/s | MFU | "
   .. "tensors peak MiB | GPU in use MiB |")
print("|---|---|---|---|---|---|---|---|---|---|")
for _, c in ipairs(CONFIGS) do
   local r = best[key_of(c)]
   local tflops = r.tps * FLOPS_PER_TOKEN / 1e12
   print(("| %s | %.0f | %.1f | %.1f | %.1f | %.1f | %.1f | %s | %s | %s |"):format(label(c), r.tps,
      1e3 * TOKENS_PER_STEP / r.tps, r.fwd, r.bwd, r.opt, tflops,
      peak and ("%.1f%%"):format(100 * tflops / peak) or "-", mib(r.peak_mb), mib(r.gpu_mb)))
end
print("\n(model TFLOP/s and MFU over the whole step, optimizer included; tensors peak: lwopt's "
   .. "own count of parameters, gradients, optimizer state and activations; GPU in use: the "
   .. "driver's, max over the run; on a GPU, opt ms is the host's time in the step, whose "
   .. "queued tail the next step's forward waits for)\n")

for _, pair in ipairs(MUON_COST_PAIRS) do
   local matmul, params = pair[1], pair[2]
   local a = best[key_of({ optimizer = "adamw", matmul = matmul, params = params })]
   local m = best[key_of({ optimizer = "muon", matmul = matmul, params = params })]
   local cost = a.tps / m.tps - 1
   print(("%s GEMMs, %s params: Muon's cost over AdamW %.3f (adamw / muon tokens/s - 1; opt ms "
      .. "%.1f against %.1f, Muon's part %.1f); Newton-Schulz share of the step's FLOPs %.3f; "
      .. "ratio %.2f (goal <= 1.25)"):format(matmul, params, cost, m.opt, a.opt, m.muon, NS_SHARE,
      cost / NS_SHARE))
end
