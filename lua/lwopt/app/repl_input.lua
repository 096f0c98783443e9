-- repl_input.lua: where the REPL's lines come from. On a terminal: GNU readline through Debian's
-- lua-readline package (scripts/deps.sh installs it), for line editing, history kept in a file
-- and Tab completion; elsewhere (a pipe, a file, a machine without the package) lines are read
-- plainly, the prompt written to the output, as before.
-- Why lua-readline: its C module is built for Lua 5.1's ABI, which LuaJIT loads as it is
-- (measured here: under a pseudo-terminal, Up recalls the previous line, Backspace edits, the
-- history file is read and written); GNU readline through LuaJIT's FFI would need a second,
-- hand-written cdef beside the one lwopt/C.lua generates from lw.h, and rlwrap is another
-- process and package that wraps the whole session, plain reading included.
-- The history file is read here, not by readline: only a regular file, at most MAX_BYTES of it;
-- cut to its last KEEP lines through a new file renamed over it, so that a write that fails (a
-- full disk, a file-size limit) leaves the old history whole. Each line entered is appended to
-- it at once (so a session that ends by os.exit, Ctrl-C or a crash keeps it). A history path
-- that is a directory, a device or a FIFO, or a file that cannot be read or written, only means
-- no history, said in one line.
local ffi = require("ffi")
local C = require("lwopt.C")
local files = require("lwopt.files")
local errors = require("lwopt.errors")

local input = {}

-- History lines kept in the file (older ones are dropped when a session starts).
input.KEEP = 1000

-- The most of a history file that is read: far more than KEEP lines of typing; a larger file is
-- not a history this REPL wrote, and is left as it is.
input.MAX_BYTES = 4 * 1024 * 1024

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

-- The contents of the regular file at path (links followed), at most input.MAX_BYTES; nil and
-- why not.
local function read_bounded(path)
   local data, n = ffi.new("void*[1]"), ffi.new("int64_t[1]")
   if C.lib.lw_file_read(path, input.MAX_BYTES, true, data, n) ~= 0 then
      return nil, errors.plain(C.last_error())
   end
   local text = ffi.string(data[0], n[0])
   C.lib.lw_file_read_free(data[0])
   return text
end

-- Replaces the file at path by text: written to a new file beside it, then renamed over it, so
-- the old file stays whole unless the new one was written whole. Returns true, or false.
local function replace(path, text)
   -- a history that is a symbolic link: the file it names is replaced, the link stays
   local ok, real = pcall(files.real_path, path)
   if not ok then return false end
   local new = real .. ".new"
   if C.lib.lw_file_write(new, text, #text, nil) ~= 0 then
      C.lib.lw_path_remove(new)
      return false
   end
   return C.lib.lw_path_rename(new, real) == 0
end

-- The history in the file at path: { lines (its last input.KEEP, oldest first), file (open for
-- appending), path }, or nil and the line that says why there is none. A missing file is made
-- (mkdir: a function(dir, mode) creating its missing folders, or nil). A file of more lines
-- than input.KEEP is cut to its last KEEP (replace: the old one whole if that fails).
function input.open_history(path, mkdir)
   if path == nil then return nil, "no history file (neither HOME nor LWOPT_HISTORY is set)" end
   if mkdir then make_parents(path, mkdir) end
   local ok, kind = pcall(files.kind, path)
   if not ok then return nil, "history off: " .. errors.plain(tostring(kind)) end
   if kind == "dir" then return nil, ("history off: %s is a directory"):format(path) end
   if kind == "other" then
      return nil, ("history off: %s is not a regular file"):format(path)
   end
   local lines = {}
   if kind == "file" then
      local text, why = read_bounded(path)
      if text == nil then return nil, "history off: " .. why end
      for line in text:gmatch("[^\n]+") do lines[#lines + 1] = line end
      if #lines > input.KEEP then
         lines = { unpack(lines, #lines - input.KEEP + 1) }
         replace(path, table.concat(lines, "\n") .. "\n")
      end
   end
   local f, why = io.open(path, "a")
   if f == nil then return nil, ("history not saved: cannot write %s"):format(why) end
   return { lines = lines, file = f, path = path }
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
   local history, why = input.open_history(o.history, type(stat) == "table" and stat.mkdir or nil)
   -- no histfile: the package would read whatever is there, of any size, and it drops its
   -- default one; the lines are read, added and saved here
   rl.set_options{ histfile = "", auto_add = false, completion = o.complete ~= nil }
   for _, line in ipairs(history and history.lines or {}) do rl.add_history(line) end
   local file = history and history.file
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
      path = history and o.history,
      read = function(_, prompt)
         local line = rl.readline(prompt)
         if line ~= nil and line:match("%S") and line ~= previous then
            rl.add_history(line)
            previous = line
            -- a line that cannot be appended (a full disk, the file-size limit): said once,
            -- and no more are tried
            if file and not (file:write(line, "\n") and file:flush()) then
               io.stderr:write(("history not saved from here on: cannot write %s\n")
                  :format(o.history))
               file:close()
               file = nil
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
