-- repl.lua: an interactive LuaJIT session with lw loaded. Expressions print their values
-- (strings as they are, so layout:show() prints the map); incomplete input continues on the
-- next line; errors print a message and the session goes on.
local repl = {}

local BANNER = [[
lwopt %s, LuaJIT REPL. `lw` is loaded; expressions print their value. Try:
  l = lw.layout.compute(lw.arch.gpt{n_layer = 12, n_embd = 768, n_head = 12}, {dp = 8})
  l:show()
  l:stats().cost_imbalance
  lw.layout.compute(lw.arch.llama{n_layer = 4, n_embd = 512, n_head = 8, ffn_hidden = 1536},
                    {dp = 4, algorithm = "lpt", bucket_size = 2e6}):show()
  l:place("h.0.attn.qkv.weight")
Ctrl-D quits.]]

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

-- repl.run{ lw = <module>, input = <file>, output = <file>, prompt = "lw> " }
function repl.run(o)
   local input, output = o.input or io.stdin, o.output or io.stdout
   local env = setmetatable({ lw = o.lw }, { __index = _G })
   output:write(BANNER:format(o.lw.version), "\n")
   local pending = nil
   while true do
      output:write(pending and ">> " or (o.prompt or "lw> "))
      output:flush()
      local line = input:read("*l")
      if line == nil then
         output:write("\n")
         return 0
      end
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
end

return repl
