-- helpers.lua: shared by the specs: an output sink that collects writes, running a shell
-- command from the repo root, temporary files and directories (and their removal after each
-- test), token shards and the global batches drawn from them, tokenizer files, a safetensors
-- reader and writer of many tensors, a training log's records, and small logs to read.
local helpers = {}

-- An object with :write and :flush, like a file, whose text is helpers.text(sink).
function helpers.sink()
   local parts = {}
   return {
      parts = parts,
      write = function(self, ...)
         for _, s in ipairs({ ... }) do parts[#parts + 1] = tostring(s) end
         return self
      end,
      flush = function() end,
      text = function() return table.concat(parts) end,
   }
end

-- Runs a shell command; returns its stdout+stderr and exit status.
function helpers.sh(command)
   local pipe = io.popen("(" .. command .. ") 2>&1; echo \"__status=$?\"")
   local out = pipe:read("*a")
   pipe:close()
   local status = tonumber(out:match("__status=(%d+)%s*$"))
   return out:gsub("__status=%d+%s*$", ""), status
end

-- Runs a shell command with its stderr kept apart; returns its stdout, stderr and exit status.
function helpers.sh_apart(command)
   local err = os.tmpname()
   local out, status = helpers.sh(command .. " 2> " .. err)
   local f = assert(io.open(err))
   local text = f:read("*a")
   f:close()
   os.remove(err)
   return out, text, status
end

-- The whole contents of the file at path; nil when it cannot be opened.
function helpers.slurp(path)
   local f = io.open(path, "rb")
   if f == nil then return nil end
   local text = f:read("*a")
   f:close()
   return text
end

-- The lines a shell command prints, as a list.
function helpers.lines_of(command)
   local pipe, list = io.popen(command), {}
   for line in pipe:lines() do list[#list + 1] = line end
   pipe:close()
   return list
end

-- A temporary path with nothing there yet (os.tmpname's name, its file removed).
function helpers.fresh_path()
   local path = os.tmpname()
   os.remove(path)
   return path
end

-- A new empty temporary directory; returns its path.
function helpers.tempdir()
   local dir = helpers.fresh_path()
   assert(os.execute("mkdir -p " .. dir) == 0, "cannot create " .. dir)
   return dir
end

-- A temporary file holding text; returns its path.
function helpers.tempfile(text)
   local path = os.tmpname()
   local f = assert(io.open(path, "w"))
   f:write(text)
   f:close()
   return path
end

-- A function keep(path) that returns path, the file there removed after each test: pass the
-- after_each of the describe block calling it (busted gives it to spec files, not to modules).
function helpers.temp_paths(after_each)
   local paths = {}
   after_each(function()
      for _, path in ipairs(paths) do os.remove(path) end
      paths = {}
   end)
   return function(path)
      paths[#paths + 1] = path
      return path
   end
end

-- Little-endian bytes of an integer (negative: two's complement) in `size` bytes.
local function le(v, size)
   v = v % 2 ^ (8 * size)
   local b = {}
   for i = 1, size do
      b[i] = string.char(v % 256)
      v = math.floor(v / 256)
   end
   return table.concat(b)
end

-- Writes a token shard as llm.c does (256 int32 of header: magic 20240520, version, count; then
-- the tokens, uint16 for version 1, uint32 for 2) and returns its path. opts: version (1),
-- magic, count (the header's; default #ids), size (bytes per token written; default the
-- version's), path (default a new temporary file).
function helpers.token_shard(ids, opts)
   opts = opts or {}
   local version = opts.version or 1
   local size = opts.size or (version == 1 and 2 or 4)
   local parts = { le(opts.magic or 20240520, 4), le(version, 4), le(opts.count or #ids, 4),
      string.rep("\0", 1024 - 12) }
   for i, id in ipairs(ids) do parts[i + 4] = le(id, size) end
   local path = opts.path or os.tmpname()
   local f = assert(io.open(path, "wb"))
   f:write(table.concat(parts))
   f:close()
   return path
end

-- A small token dataset in dir as llm.c names it: t_train_000.bin (version 1) and
-- t_train_001.bin (version 2) of n tokens each, t_val_000.bin (version 1) of n / 5, every id
-- below vocab. Returns the training pattern, dir .. "/t_train_*.bin".
function helpers.token_dataset(dir, n, vocab)
   local function ids(count, seed)
      local list, x = {}, seed
      for i = 1, count do
         x = (x * 1103515245 + 12345) % 2147483648
         list[i] = x % vocab
      end
      return list
   end
   helpers.token_shard(ids(n, 1), { path = dir .. "/t_train_000.bin" })
   helpers.token_shard(ids(n, 2), { path = dir .. "/t_train_001.bin", version = 2 })
   helpers.token_shard(ids(math.floor(n / 5), 3), { path = dir .. "/t_val_000.bin" })
   return dir .. "/t_train_*.bin"
end

-- The global batch of seed 42, step 3 that d (lw.data or lw.tokens, seq_len 8) draws on
-- `ranks` ranks over `accum` micro-steps of b sequences each, micro-step by micro-step and rank
-- by rank: a list of row(tokens, targets, i) for each sequence i drawn.
function helpers.global_batch(d, ranks, accum, b, row)
   local ffi = require("ffi")
   local seqs = {}
   local tokens, targets = ffi.new("int32_t[?]", b * 8), ffi.new("int32_t[?]", b * 8)
   for micro = 0, accum - 1 do
      for rank = 0, ranks - 1 do
         d:train_batch(tokens, targets, 42, 3, micro, rank, ranks, b, 8)
         for i = 0, b - 1 do seqs[#seqs + 1] = row(tokens, targets, i) end
      end
   end
   return seqs
end

-- Writes a tokenizer file as llm.c does (gpt2_tokenizer.bin: 256 uint32 of header: magic
-- 20240328, version, vocabulary size and, in version 2, the end-of-text id; then per token a
-- length byte and its bytes) for pieces (a list of strings, token 0 first) and returns its path.
-- opts: magic, version (2), vocab (the header's; default #pieces), eot (default the last
-- token), cut (bytes dropped from the end), path (default a new temporary file).
function helpers.tokenizer_file(pieces, opts)
   opts = opts or {}
   local version = opts.version or 2
   local parts = { le(opts.magic or 20240328, 4), le(version, 4), le(opts.vocab or #pieces, 4),
      le(opts.eot or #pieces - 1, 4), string.rep("\0", 1024 - 16) }
   for _, piece in ipairs(pieces) do parts[#parts + 1] = string.char(#piece) .. piece end
   local text = table.concat(parts)
   text = text:sub(1, #text - (opts.cut or 0))
   local path = opts.path or os.tmpname()
   local f = assert(io.open(path, "wb"))
   f:write(text)
   f:close()
   return path
end

-- Reads one tensor of a safetensors file with Debian's python3 and numpy, parsing the header
-- itself (an independent reader). Returns { entries (the file's tensors), shape = {...}, first,
-- last } or fails the spec.
function helpers.read_safetensors(path, name)
   local script = helpers.tempfile([==[
import json, struct, sys
import numpy as np
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
header.pop("__metadata__", None)
t = header[sys.argv[2]]
assert t["dtype"] == "F32"
a, b = t["data_offsets"]
x = np.frombuffer(raw[8 + n + a:8 + n + b], dtype=np.float32).reshape(t["shape"])
assert np.isfinite(x).all()
print(len(header), " ".join(str(d) for d in x.shape), repr(float(x.flat[0])), repr(float(x.flat[-1])))
]==])
   local out, status = helpers.sh("/usr/bin/python3 " .. script .. " " .. path .. " '" .. name .. "'")
   os.remove(script)
   assert(status == 0, out)
   local count, dims, first, last = out:match("^(%d+) ([%d ]+) (%S+) (%S+)")
   local shape = {}
   for d in dims:gmatch("%d+") do shape[#shape + 1] = tonumber(d) end
   return { entries = tonumber(count), shape = shape, first = tonumber(first), last = tonumber(last) }
end

-- Writes a safetensors file of n tensors of one F32 value each, named t.1 ... t.n: a file with
-- more tensors than any model, for the readers' cost in their number. Returns path.
function helpers.many_tensors(path, n)
   local ffi = require("ffi")
   local one, list = ffi.new("float[1]", 1), {}
   for i = 1, n do list[i] = { name = "t." .. i, count = 1, data = one } end
   require("lwopt.safetensors").write(path, list)
   return path
end

-- A training log's records, decoded (lwopt's JSON parser), in file order: its step records
-- and, apart, its configuration records (kind "config": a run's first line, a resumed run's).
function helpers.log_records(path)
   local json = require("lwopt.json")
   local steps, configs = {}, {}
   for line in io.lines(path) do
      local rec = json.decode(line)
      if rec.kind == "config" then configs[#configs + 1] = rec else steps[#steps + 1] = rec end
   end
   return steps, configs
end

-- A training log's configuration record, for the log readers' specs (over: fields changed).
function helpers.log_config(over)
   local json = require("lwopt.json")
   local c = { kind = "config", format = 1, lwopt_version = "0.1.0", commit = json.null,
      start_time = "2025-01-01T00:00:00.000Z", start_wall_time = 1000, host = "h", ranks = 2,
      unit = "byte", tokens_per_step = 256, start_step = 1, run_id = json.null,
      flags = json.object({ steps = 4, preset = "tiny" }) }
   for k, v in pairs(over or {}) do c[k] = v end
   return c
end

-- A step record: step n of a run whose loss falls from `top` by 1/8 a step (exact in binary and
-- decimal), validation 0.25 above it on even steps, two ranks' memory.
function helpers.log_step(n, top, over)
   local json = require("lwopt.json")
   local r = { kind = "step", step = n, tokens = 256 * n, loss = top - n / 8, lr = 1e-3 * n,
      grad_norm = 1.5, tokens_per_s = 1000 * n, wall_time = 1000 + n,
      time_ms = json.object({ fwd = 1.25, bwd = 2.5 }), comm_mb = 0.5,
      memory_mb = json.object({ peak = json.array({ 10 + n, 20 + n }), params = { 1, 1 } }),
      by_rank = json.object({ muon_ms = json.array({ 1, 2 }) }) }
   if n % 2 == 0 then r.val_loss = top - n / 8 + 0.25 end
   for k, v in pairs(over or {}) do r[k] = v end
   return r
end

-- Writes records as a log at path, one JSON object a line; returns path.
function helpers.write_log(path, records)
   local json = require("lwopt.json")
   local f = assert(io.open(path, "w"))
   for _, rec in ipairs(records) do f:write(json.encode(json.object(rec)), "\n") end
   f:close()
   return path
end

-- Two logs in dir: a.jsonl, 4 steps in one run; b.jsonl, 2 steps, then resumed from step 1
-- (step 2 redone) to step 6. Returns their paths.
function helpers.two_logs(dir)
   local config, step = helpers.log_config, helpers.log_step
   local a = helpers.write_log(dir .. "/a.jsonl", { config(), step(1, 5), step(2, 5), step(3, 5),
      step(4, 5) })
   local b = helpers.write_log(dir .. "/b.jsonl", { config({ run_id = "run-b" }), step(1, 4),
      step(2, 4, { loss = 9 }), config({ start_wall_time = 2000, start_step = 2,
      run_id = "run-b" }), step(2, 4, { wall_time = 2002 }), step(3, 4, { wall_time = 2003 }),
      step(4, 4, { wall_time = 2004 }), step(5, 4, { wall_time = 2005 }),
      step(6, 4, { wall_time = 2006 }) })
   return a, b
end

return helpers
