-- repl_input.lua: where the REPL's lines come from. On a terminal: GNU readline through Debian's
-- lua-readline package (scripts/deps.sh installs it), for line editing, history kept in a file
-- and Tab completion; elsewhere (a pipe, a file, a machine without the package) lines are read
-- plainly, the prompt written to the output, as before.
-- Why lua-readline: its C module is built for Lua 5.1's ABI, which LuaJIT loads as it is
-- (measured here: under a pseudo-terminal, Up recalls the previous line, Backspace edits, the
-- history file is read and written); GNU readline through LuaJIT's FFI would need a second,
-- hand-written cdef beside the one lwopt/C.lua generates from lw.h, and rlwrap is another
-- process and package that wraps the whole session, plain reading included.
-- It never writes the history itself: each line entered is appended to the file at once (so a
-- session that ends by os.exit, Ctrl-C or a crash keeps it), and a file that cannot be written
-- only means no history, said once.
local input = {}

-- History lines kept in the file (older ones are dropped when a session starts).
input.KEEP = 1000

-- The history file: $LWOPT_HISTORY (empty: none), else $XDG_STATE_HOME/lwopt/history when
-- XDG_STATE_HOME is set, else ~/.lwopt_history; nil when there is nowhere to keep it. getenv:
-- os.getenv or a stand-in.
function input.history_path(getenv)
   getenv = getenv or os.getenv
   local explicit = getenv("LWOPT_HISTORY")
   if explicit then return explicit ~= "" and explicit or nil end
   local state = getenv("XDG_STATE_HOME")
   if state and state ~= "" then return state .. "/lwopt/history" end
   local home = getenv("HOME")
   if home and home ~= "" then return home .. "/.lwopt_history" end
   return nil
end

-- The plain reader: the prompt on output, a line from input.
local function plain(i, o)
   return {
      kind = "plain",
      read = function(_, prompt)
         o:write(prompt)
         o:flush()
         return i:read("*l")
      end,
      close = function() end,
   }
end

-- Creates the folders above path that are missing (XDG_STATE_HOME/lwopt may not exist yet).
local function make_parents(path, mkdir)
   local parts, at = {}, 1
   while true do
      local slash = path:find("/", at + 1, true)
      if slash == nil then break end
      parts[#parts + 1] = path:sub(1, slash - 1)
      at = slash
   end
   for _, dir in ipairs(parts) do
      if dir ~= "" then mkdir(dir, 448) end -- 0700; an existing folder is left as it is
   end
end

-- Keeps the last input.KEEP lines of the history file; a file that cannot be rewritten stays.
local function trim(path)
   local f = io.open(path, "r")
   if f == nil then return end
   local lines = {}
   for line in f:lines() do lines[#lines + 1] = line end
   f:close()
   if #lines <= input.KEEP then return end
   local out = io.open(path, "w")
   if out == nil then return end
   out:write(table.concat(lines, "\n", #lines - input.KEEP + 1), "\n")
   out:close()
end

-- The history file opened for appending, or nil and why not.
local function open_history(path, posix_stat)
   if path == nil then return nil, "no history file (neither HOME nor LWOPT_HISTORY is set)" end
   if posix_stat then make_parents(path, posix_stat.mkdir) end
   trim(path)
   local f, why = io.open(path, "a")
   if f == nil then return nil, ("history not saved: cannot write %s"):format(why) end
   return f
end

-- Whether stdin is a terminal (lua-posix comes with lua-readline; without it, test(1) says).
local function stdin_is_terminal()
   local ok, unistd = pcall(require, "posix.unistd")
   if ok then return unistd.isatty(0) == 1 end
   local status = os.execute("test -t 0")
   return status == 0 or status == true
end

-- The readline reader; nil when stdin is not a terminal, or nil and why there is no line
-- editing when lua-readline is missing.
-- o: { history = path or nil, complete = function(word) -> { completions } or nil }
local function readline_reader(o)
   if not stdin_is_terminal() then return nil end
   local ok_rl, rl = pcall(require, "readline")
   if not ok_rl then
      return nil, "no line editing or history: lua-readline is not installed (scripts/deps.sh "
         .. "installs it)"
   end
   local _, stat = pcall(require, "posix.sys.stat")
   local file, why = open_history(o.history, type(stat) == "table" and stat or nil)
   -- histfile reads the file into readline's list (and drops the package's default one);
   -- lines are added and saved here, not by the package
   rl.set_options{ histfile = file and o.history or "", auto_add = false,
      completion = o.complete ~= nil }
   if o.complete then
      rl.set_complete_function(function(text, from, to)
         local list = o.complete(text:sub(from, to)) or {}
         -- "lw.layout." and "lw.now(" go on without the space readline would add after them
         if #list == 1 and list[1]:match("[.(]$") then rl.set_completion_append_character("") end
         return list
      end)
   end
   local previous
   return {
      kind = "readline",
      note = why,
      path = file and o.history,
      read = function(_, prompt)
         local line = rl.readline(prompt)
         if line ~= nil and line:match("%S") and line ~= previous then
            rl.add_history(line)
            previous = line
            if file then
               file:write(line, "\n")
               file:flush()
            end
         end
         return line
      end,
      close = function()
         if file then file:close() end
      end,
   }
end

-- A reader with :read(prompt) -> line or nil at the end, :close(), kind ("readline" or
-- "plain"), path (the history file, readline only) and note (on a terminal, why there is no
-- history or no line editing; else nil).
-- o: { input, output (files; given: always plain), history = path, complete = function(word) }.
function input.open(o)
   local why
   if o.input == nil and o.output == nil then
      local reader
      reader, why = readline_reader(o)
      if reader then return reader end
   end
   local reader = plain(o.input or io.stdin, o.output or io.stdout)
   reader.note = why
   return reader
end

return input
