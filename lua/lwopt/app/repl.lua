-- repl.lua: an interactive LuaJIT session with lw loaded. Expressions print their values
-- (strings as they are, so layout:show() prints the map); incomplete input continues on the
-- next line; errors print a message and the session goes on; `help` says what there is. Lines
-- come from repl_input.lua: readline with history and Tab completion on a terminal, plain reads
-- from a pipe or a file.
local repl_input = require("lwopt.app.repl_input")

local repl = {}

local BANNER = [[
lwopt %s, LuaJIT REPL with `lw` loaded: expressions print their value.
`help` lists what there is; `quit` or Ctrl-D ends the session.]]

-- What `help` says of each lw module, with its main calls (docs/lua.md has every one). A spec
-- checks that every module of lw is here and that every call named exists.
repl.MODULES = {
   { "models", "the model registry: each model's config, modules and parameter specs",
     "names(), config(name, cfg), build(name, cfg, run), specs(name, cfg), load(file)" },
   { "arch", "a model's parameter specs in definition order",
     "gpt{n_layer, n_embd, n_head, ...}, llama{...}, moe{...}, numel(specs)" },
   { "route", "which optimizer updates each parameter: rules as data, first match wins",
     "lw.route(specs [, rules]), default_rules" },
   { "layout", "which buffer, bucket, offset and owning rank each parameter gets",
     "compute(specs, {dp, algorithm, bucket_size, ...}) -> l" },
   { "stepmodel", "the predicted step time of a layout on a machine",
     "predict(l, {tokens, machine}), table(result), compare(specs, layout_opts, opts)" },
   { "comm", "the communicator: one rank, or MPI under mpirun", "init([timeout]), run(fn, ...)" },
   { "ddp", "flat, bucketed parameter and gradient buffers over the ranks",
     "new(specs, comm, {mode, zero, overlap, ...})" },
   { "optim", "the layer-wise optimizer: Muon for matrices, AdamW for the rest",
     "new(ddp, {lr, weight_decay, clip, muon, adamw})" },
   { "tensor", "views into lwopt buffers", "view(ptr, shape, owner), is_tensor(x)" },
   { "nn", "model modules (forward, backward, parameters)",
     "GPT.new(cfg), Block, CausalSelfAttention, MLP, MoE, Linear, Embedding, LayerNorm" },
   { "data", "a text file read as bytes", "load(path, {seq_len})" },
   { "data_order", "a dataset's training sequences read in order, epoch after epoch",
     "sequential(dataset, {seq_len, global_batch, start_step, start}), resumed_index(p, n)" },
   { "tokens", "token shards in llm.c's format", "open(pattern, {vocab, seq_len})" },
   { "schedule", "learning-rate schedules: cosine, linear, constant, warmup-stable-decay",
     "check(plan), multiplier(plan, step), text(plan)" },
   { "train", "the training loop",
     "run(run), evaluate(run, max), schedule(s, steps, warmup, min_ratio)" },
   { "checkpoint", "checkpoints keyed by parameter name",
     "save(dir, s), load(path, s), list(dir), latest(dir), find(dir, opts)" },
   { "ep", "expert parallelism's groups", "groups(comm, e, n_expert), check(e, world, n_expert)" },
   { "tp", "tensor parallelism's groups and shards", "groups(comm, t), check(t, world, dims)" },
   { "json", "JSON with sorted keys", "encode(value [, indent]), decode(text)" },
}

-- The text `help` prints. history: the history file, or a note on why there is none, or nil.
function repl.help_text(lw, history)
   local lines = {
      ("lwopt %s REPL: LuaJIT with `lw` (require(\"lwopt\")) loaded."):format(lw.version),
      "",
      "  an expression        prints its value (strings as they are, tables briefly)",
      "  a statement          runs; globals stay for the next lines (x = 1; function f() end)",
      "  incomplete input     goes on at the next line, prompt >>",
      "  help                 this text",
      "  quit, exit, Ctrl-D   end the session",
      "",
      "Show a layout (the parameter map: buffers, buckets, each rank's shard):",
      "  l = lw.layout.compute(lw.arch.gpt{n_layer = 12, n_embd = 768, n_head = 12}, {dp = 8})",
      "  l:show()                       the map ({ascii = true, width = 60} to change it)",
      "  l:stats().cost_imbalance       padding, bytes and balance in l:stats()",
      "  l:place(\"h.0.attn.qkv.weight\")  where one parameter lives",
      "  l:json(\"  \")                   the whole layout as JSON",
      "  lw.stepmodel.table(lw.stepmodel.predict(l, {tokens = 8192}))   its predicted step",
      "",
      "Modules (lw.<name>; docs/lua.md has every call):",
   }
   for _, m in ipairs(repl.MODULES) do
      lines[#lines + 1] = ("  %-12s%s"):format(m[1], m[2])
      lines[#lines + 1] = ("  %-12s  %s"):format("", m[3])
   end
   lines[#lines + 1] = "Also: lw.version, lw.library, lw.has_cuda(), lw.device_info(name), "
      .. "lw.device_line(name), lw.now()."
   if history then
      lines[#lines + 1] = ""
      lines[#lines + 1] = "Line editing: arrows, Ctrl-R searches the history, Tab completes "
         .. "names (lw.la<Tab>)."
      lines[#lines + 1] = "History: " .. history
   end
   return table.concat(lines, "\n")
end

-- The names a partly typed one ("lw.lay", "l:sh", "pri") may complete to, sorted: the fields
-- of the table it is in (for "a:b", the methods of a's metatable), or the session's globals.
-- Tables end in "." and functions in "(", so that completion goes on from there.
function repl.complete(env, word)
   local head, sep, tail = word:match("^(.-)([.:])([%w_]*)$")
   if head == nil then head, sep, tail = nil, "", word end
   if not tail:match("^[%w_]*$") then return {} end
   local scopes = {}
   if head == nil then
      scopes = { env, _G }
   else
      local t = env
      for name in head:gmatch("[^.]+") do
         if not name:match("^[%a_][%w_]*$") or type(t) ~= "table" then return {} end
         local ok, value = pcall(function() return t[name] end)
         if not ok then return {} end
         t = value
      end
      if sep == ":" then
         local mt = getmetatable(t)
         t = mt and (type(mt.__index) == "table" and mt.__index or mt) or nil
      end
      if type(t) ~= "table" then return {} end
      scopes = { t }
   end
   local seen, list = {}, {}
   for _, scope in ipairs(scopes) do
      for k, v in pairs(scope) do
         if type(k) == "string" and k:match("^[%a_][%w_]*$") and k:sub(1, #tail) == tail
            and not seen[k] and (sep ~= ":" or type(v) == "function") then
            seen[k] = true
            local suffix = type(v) == "table" and "." or type(v) == "function" and "(" or ""
            list[#list + 1] = (head and head .. sep or "") .. k .. suffix
         end
      end
   end
   table.sort(list)
   return list
end

-- A one-line picture of a value; tables show up to `limit` entries, two levels deep.
function repl.inspect(v, depth)
   depth = depth or 0
   if type(v) == "string" then return depth == 0 and v or string.format("%q", v) end
   if type(v) ~= "table" then return tostring(v) end
   local mt = getmetatable(v)
   if mt and mt.__tostring then return tostring(v) end
   if depth >= 2 then return "{...}" end
   local parts, n, limit = {}, 0, 12
   for i = 1, #v do
      n = n + 1
      if n <= limit then parts[#parts + 1] = repl.inspect(v[i], depth + 1) end
   end
   local keys = {}
   for k in pairs(v) do
      if not (type(k) == "number" and k >= 1 and k <= #v and k == math.floor(k)) then
         keys[#keys + 1] = k
      end
   end
   table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
   for _, k in ipairs(keys) do
      n = n + 1
      if n <= limit then
         local name = type(k) == "string" and k:match("^[%a_][%w_]*$") and k
            or "[" .. repl.inspect(k, depth + 1) .. "]"
         parts[#parts + 1] = name .. " = " .. repl.inspect(v[k], depth + 1)
      end
   end
   if n > limit then parts[#parts + 1] = ("... (%d entries)"):format(n) end
   return "{ " .. table.concat(parts, ", ") .. " }"
end

local function compile(source, env)
   local f, err = loadstring("return " .. source, "=repl")
   if f == nil then f, err = loadstring(source, "=repl") end
   if f then setfenv(f, env) end
   return f, err
end

-- The words the session takes itself when a line is only one of them.
local COMMANDS = { help = "help", ["help()"] = "help", quit = "quit", exit = "quit",
   ["quit()"] = "quit", ["exit()"] = "quit" }

-- repl.run{ lw = <module>, input = <file>, output = <file>, prompt = "lw> ", history = path }:
-- with neither input nor output given, stdin and stdout (readline on a terminal; history:
-- default repl_input.history_path()). Returns 0 at the end of the input or at `quit`.
function repl.run(o)
   local output = o.output or io.stdout
   local env = setmetatable({ lw = o.lw }, { __index = _G })
   local history = o.history
   if history == nil and o.input == nil and o.output == nil then
      history = repl_input.history_path()
   end
   local reader = repl_input.open{ input = o.input, output = o.output, history = history,
      complete = function(word) return repl.complete(env, word) end }
   local where = reader.kind == "readline" and (reader.note or reader.path) or nil
   local done = false
   env.help = function() output:write(repl.help_text(o.lw, where), "\n") end
   env.quit = function() done = true end
   env.exit = env.quit
   output:write(BANNER:format(o.lw.version), "\n")
   if reader.note then output:write(reader.note, "\n") end
   local pending = nil
   while not done do
      local line = reader:read(pending and ">> " or (o.prompt or "lw> "))
      if line == nil then
         output:write("\n")
         break
      end
      local command = pending == nil and COMMANDS[line:match("^%s*(.-)%s*$")]
      if command == "help" then
         env.help()
      elseif command == "quit" then
         break
      else
         local source = pending and (pending .. "\n" .. line) or line
         local f, err = compile(source, env)
         if f == nil and err:match("<eof>'?$") then
            pending = source
         else
            pending = nil
            if f == nil then
               output:write(err, "\n")
            else
               local results = { xpcall(f, debug.traceback) }
               if not results[1] then
                  -- the traceback down to the REPL's own frames, which tell the user nothing
                  local text = tostring(results[2])
                  output:write((text:gsub("\n%s*%[C%]: in function 'xpcall'.*$", "")), "\n")
               else
                  for i = 2, table.maxn(results) do
                     output:write(repl.inspect(results[i]), "\n")
                  end
               end
            end
         end
      end
      output:flush()
   end
   reader:close()
   return 0
end

return repl
