-- init_from.lua: the recipe's --init-from at every ZeRO level, rank count, --tp, --ep and
-- parameter dtype: a run started from a file with a learning rate of 1e-30 (an update far below
-- every weight's last bit) ends with exactly the file's weights, so its --save-params must equal
-- the file byte for byte: lwopt's own names (1 rank; 2 ranks at ZeRO-2 and ZeRO-3 with buckets;
-- --tp 2; packed layout), an hf-gpt2 export (2 ranks, ZeRO-3), an --arch llama run's hf-llama
-- export (interleaved pairing, --tp 2), an --arch nanochat run's nanochat export (2 ranks,
-- ZeRO-3), a mixture of experts at --ep 2, and a BF16 file into bf16 parameters at ZeRO-3 (its
-- values exactly).
-- Prints "N passed, M failed". Usage: bin/lwopt run tests/lua/init_from.lua
local ffi = require("ffi")
local safetensors = require("lwopt.safetensors")
local tally = dofile("tests/lua/tally.lua")
local expect, sh, slurp = tally.expect, tally.sh, tally.slurp

local tmp = os.tmpname()
os.remove(tmp)

-- The recipe (tiny preset) on np ranks; its output to the file out.
local function recipe(np, args, out)
   local launcher = np > 1
      and ("mpirun --oversubscribe -np %d -x OPENBLAS_NUM_THREADS=1 "):format(np) or ""
   return sh("timeout 300 " .. launcher .. "luajit recipes/gpt_small.lua --preset tiny --batch 2 "
      .. "--sample 0 --quiet " .. args .. " > " .. (out or "/dev/null") .. " 2>&1")
end

-- Whether two safetensors files hold the same tensors by name, bit for bit (in any order).
local function same_tensors(a, b)
   local ok, sa = pcall(safetensors.open, a)
   local ok2, sb = pcall(safetensors.open, b)
   if not (ok and ok2) then return false end
   local names = safetensors.names(sb)
   if #safetensors.names(sa) ~= #names then return false end
   for _, name in ipairs(names) do
      local x, y = safetensors.find(sa, name), safetensors.find(sb, name)
      if x == nil or x.bytes ~= y.bytes
         or ffi.string(x.data, x.bytes) ~= ffi.string(y.data, y.bytes) then
         return false
      end
   end
   return true
end

-- Starts from `file` and changes nothing: one step at a learning rate of 1e-30.
local function still(np, file, args, params, out)
   return recipe(np, ("--steps 1 --lr 1e-30 --adamw-lr 1e-30 --warmup 0 --init-from %s "
      .. "--save-params %s %s"):format(file, params, args), out)
end

local reference = tmp .. "-ref.st"
assert(recipe(1, "--steps 2 --save-params " .. reference))
local want = slurp(reference)

for _, case in ipairs({
   { 1, "" },
   { 2, "--zero 2" },
   { 2, "--zero 3 --bucket-size 20000" },
   { 2, "--tp 2" },
   { 2, "--layout packed --zero 3 --bucket-size 20000" },
}) do
   local np, args = case[1], case[2]
   local params, out = tmp .. "-p.st", tmp .. "-p.out"
   local ok = still(np, reference, args, params, out)
   expect(ok and slurp(params) == want, ("lwopt's names at %d rank%s %s: the file's weights "
      .. "exactly"):format(np, np > 1 and "s" or "", args))
   expect((slurp(out) or ""):find("initialised from " .. reference .. ": 27 tensors by lwopt's "
      .. "names, F32; the optimizer starts fresh\n", 1, true) ~= nil,
      "and says so in one line: " .. (slurp(out) or ""))
   os.remove(params)
   os.remove(out)
end

-- an hf-gpt2 export read back at ZeRO-3 on 2 ranks
do
   local dir, params = tmp .. "-hf", tmp .. "-hf.st"
   assert(sh("bin/lwopt export " .. reference .. " --format hf-gpt2 " .. dir .. " > /dev/null"))
   expect(still(2, dir .. "/model.safetensors", "--zero 3 --bucket-size 20000", params)
      and slurp(params) == want, "an hf-gpt2 export at 2 ranks, ZeRO-3: the weights exactly")
   sh("rm -rf " .. dir)
   os.remove(params)
end

-- an --arch llama run's hf-llama export (Q and K rows turned from the interleaved pairing to
-- halves) read back into the interleaved model, its fused weights split at --tp 2
do
   local ref, dir, params = tmp .. "-llama.st", tmp .. "-llama-hf", tmp .. "-llama-p.st"
   local llama = "--arch llama --rope-pairing interleaved "
   assert(recipe(1, llama .. "--steps 2 --save-params " .. ref))
   assert(sh("bin/lwopt export " .. ref .. " --format hf-llama " .. dir .. " > /dev/null"))
   expect(still(2, dir .. "/model.safetensors", llama .. "--tp 2", params)
      and slurp(params) == slurp(ref), "an hf-llama export at --tp 2: the weights exactly")
   sh("rm -rf " .. dir)
   for _, f in ipairs({ ref, params }) do os.remove(f) end
end

-- an --arch nanochat run's nanochat export (c_q, c_k, c_v joined, value embeddings moved back
-- under their layers) read back at ZeRO-3 on 2 ranks; nanochat's embedding and scalar rates
-- are their own flags
do
   local ref, dir, params = tmp .. "-nc.st", tmp .. "-nc", tmp .. "-nc-p.st"
   local nanochat = "--arch nanochat --embedding-lr 1e-30 --scalar-lr 1e-30 "
   assert(recipe(1, "--arch nanochat --steps 2 --save-params " .. ref))
   assert(sh("bin/lwopt export " .. ref .. " --format nanochat " .. dir .. " > /dev/null"))
   expect(still(2, dir .. "/model.safetensors", nanochat .. "--zero 3 --bucket-size 20000",
      params) and slurp(params) == slurp(ref), "a nanochat export at 2 ranks, ZeRO-3: the "
      .. "weights exactly")
   sh("rm -rf " .. dir)
   for _, f in ipairs({ ref, params }) do os.remove(f) end
end

-- a mixture of experts by lwopt's names at --ep 2: every rank takes its own experts
do
   local moe, params = tmp .. "-moe.st", tmp .. "-moe-p.st"
   assert(recipe(1, "--n-expert 4 --steps 2 --save-params " .. moe))
   expect(still(2, moe, "--n-expert 4 --ep 2", params) and same_tensors(params, moe),
      "a mixture of experts at --ep 2: every expert's weights exactly")
   os.remove(moe)
   os.remove(params)
end

-- a BF16 file into bf16 parameters at ZeRO-3: its values exactly (the reference rounded to the
-- nearest even bf16, written as BF16; --save-params writes them widened)
do
   local st = safetensors.open(reference)
   local list, widened = {}, {}
   for _, name in ipairs(safetensors.names(st)) do
      local view = safetensors.find(st, name)
      local n = tonumber(view.bytes) / 4
      local src = ffi.cast("const uint32_t *", view.data)
      local bits, wide = ffi.new("uint16_t[?]", n), ffi.new("uint32_t[?]", n)
      for i = 0, n - 1 do
         local x = tonumber(src[i])
         local r = math.floor((x + 0x7fff + math.floor(x / 65536) % 2) / 65536)
         bits[i], wide[i] = r, r * 65536
      end
      local shape = {}
      for d = 0, view.ndim - 1 do shape[d + 1] = tonumber(view.shape[d]) end
      list[#list + 1] = { name = name, shape = shape, data = bits, dtype = "BF16" }
      widened[#widened + 1] = { name = name, shape = shape, data = wide }
   end
   local bf16, rounded, params = tmp .. "-bf16.st", tmp .. "-rounded.st", tmp .. "-bf16-p.st"
   safetensors.write(bf16, list)
   safetensors.write(rounded, widened)
   local out = tmp .. "-bf16.out"
   local ok = still(2, bf16, "--param-dtype bf16 --zero 3 --bucket-size 20000", params, out)
   expect(ok and same_tensors(params, rounded),
      "a BF16 file into bf16 parameters at ZeRO-3 on 2 ranks: its values exactly")
   expect((slurp(out) or ""):find("27 tensors by lwopt's names, BF16, widened to fp32, rounded "
      .. "to the run's bf16 parameters;", 1, true) ~= nil, "and says so: " .. (slurp(out) or ""))
   for _, f in ipairs({ bf16, rounded, params, out }) do os.remove(f) end
end

-- a mismatch is one line from rank 0, before any step
do
   local out = tmp .. "-bad.out"
   local ok = recipe(2, "--n-expert 4 --steps 1 --init-from " .. reference, out)
   local said = slurp(out) or ""
   expect(not ok and said:find("[rank 0] --init-from " .. reference .. ": no tensor "
      .. "'h.0.moe.router.weight' (35 more missing; the file has 27 tensors, the model 55 by "
      .. "lwopt's names)", 1, true) ~= nil, "a dense file for a mixture of experts: " .. said)
   os.remove(out)
end

os.remove(reference)
tally.finish("init_from")
