-- files.lua: the file-system helpers of src/core/io/ (files.c, dir_list.c, paths.c,
-- file_lock.c) for Lua: what is at a path and what it names in the end, sorted directory
-- listings and wildcard patterns over them, removal, rename and truncation, a write probe, and
-- a lock held for a run, so that checkpoints and recipes never parse `ls` or guess from io.open.
-- Removal never follows a symbolic link, and reads of lwopt's own small files (files.read) take
-- regular files only.
local ffi = require("ffi")
local C = require("lwopt.C")
local errors = require("lwopt.errors")

local lib = C.lib
local files = {}

local kind_cell = ffi.new("lw_path_kind[1]")

-- "missing" | "file" | "dir" | "other" (symbolic links followed).
function files.kind(path)
   C.check(lib.lw_path_kind_of(path, kind_cell), "files.kind")
   return C.name("path_kind", kind_cell[0])
end

-- What the directory entry at path is, a symbolic link not followed: files.kind's kinds or
-- "link".
function files.entry_kind(path)
   C.check(lib.lw_path_entry_kind(path, kind_cell), "files.entry_kind")
   return C.name("path_kind", kind_cell[0])
end

local read_data, read_bytes = ffi.new("void*[1]"), ffi.new("int64_t[1]")

-- The contents of the regular file at path, at most max_bytes of them; opts.follow = false
-- refuses a symbolic link at path. Never waits on a FIFO nor reads a device forever: nil and
-- why (naming the path) for anything but a regular file of that size.
function files.read(path, max_bytes, opts)
   local follow = not (opts and opts.follow == false)
   if lib.lw_file_read(path, max_bytes, follow, read_data, read_bytes) ~= 0 then
      return nil, (C.last_error():gsub("^files: ", ""))
   end
   local text = ffi.string(read_data[0], read_bytes[0])
   lib.lw_file_read_free(read_data[0])
   return text
end

-- The names in dir, sorted bytewise.
function files.list(dir)
   local out = ffi.new("lw_dir_list*[1]")
   C.check(lib.lw_dir_list_new(dir, out), "files.list")
   local list = ffi.gc(out[0], lib.lw_dir_list_free)
   local names = {}
   for i = 0, lib.lw_dir_list_count(list) - 1 do
      names[#names + 1] = ffi.string(lib.lw_dir_list_name(list, i))
   end
   lib.lw_dir_list_free(ffi.gc(list, nil))
   return names
end

-- A shell wildcard pattern (* ? [abc] [a-z] [!x]) as an anchored Lua pattern.
local function glob_to_pattern(glob)
   local out, i = { "^" }, 1
   while i <= #glob do
      local ch = glob:sub(i, i)
      local class = ch == "[" and glob:match("^%[(!?[^%]]+)%]", i)
      if ch == "*" then
         out[#out + 1] = ".*"
      elseif ch == "?" then
         out[#out + 1] = "."
      elseif class then
         i = i + #class + 1
         out[#out + 1] = "[" .. class:gsub("^!", "^"):gsub("%%", "%%%%") .. "]"
      else
         out[#out + 1] = ch:gsub("[%^%$%(%)%%%.%[%]%*%+%-%?]", "%%%0")
      end
      i = i + 1
   end
   out[#out + 1] = "$"
   return table.concat(out)
end

-- Whether a path holds shell wildcards.
function files.has_wildcards(path) return path:find("[%*%?%[]") ~= nil end

-- The existing paths that match a shell wildcard pattern, sorted bytewise. Wildcards may stand
-- in the last component only (one directory level, listed); like the shell, they do not match
-- a leading dot. A pattern without wildcards gives itself if something is there. A missing
-- directory matches nothing.
function files.glob(pattern)
   local dir, base = pattern:match("^(.*)/([^/]*)$")
   if dir == nil then dir, base = nil, pattern end
   if dir and files.has_wildcards(dir) then
      errors.fail("files.glob", "'%s': wildcards may stand in the file name only, not in the "
         .. "directory", pattern)
   end
   if not files.has_wildcards(base) then
      return files.kind(pattern) == "missing" and {} or { pattern }
   end
   local listed = dir == nil and "." or (dir == "" and "/" or dir)
   if files.kind(listed) ~= "dir" then return {} end
   local want, found = glob_to_pattern(base), {}
   for _, name in ipairs(files.list(listed)) do
      if name:match(want) and (name:sub(1, 1) ~= "." or base:sub(1, 1) == ".") then
         found[#found + 1] = dir == nil and name or dir .. "/" .. name
      end
   end
   return found
end

function files.remove(path) C.check(lib.lw_path_remove(path), "files.remove") end

function files.rename(from, to) C.check(lib.lw_path_rename(from, to), "files.rename") end

-- Cuts the file at path to its first `bytes` bytes.
function files.truncate(path, bytes)
   C.check(lib.lw_file_truncate(path, bytes), "files.truncate")
end

local real_cell = ffi.new("char[?]", 8192)

-- The absolute path with symbolic links resolved as far as it exists, the missing rest as
-- written: two paths with the same real path name one file.
function files.real_path(path)
   C.check(lib.lw_path_real(path, real_cell, 8192), "files.real_path")
   return ffi.string(real_cell)
end

local same_cell = ffi.new("bool[1]")

-- Whether a and b are one existing file (also through hard links).
function files.same_file(a, b)
   C.check(lib.lw_path_same_file(a, b, same_cell), "files.same_file")
   return same_cell[0]
end

-- An exclusive lock on the file at path, held until released (lock:release()) or collected, or
-- until the process ends; nil and the message (naming the holder's host and pid) while another
-- process holds it.
function files.lock(path)
   local out = ffi.new("lw_file_lock*[1]")
   if lib.lw_file_lock_new(path, out) ~= 0 then return nil, C.last_error() end
   local handle = ffi.gc(out[0], lib.lw_file_lock_free)
   return { release = function()
      if handle ~= nil then lib.lw_file_lock_free(ffi.gc(handle, nil)) end
      handle = nil
   end }
end

-- Creates dir and its missing parents (an existing directory is fine); a failure leaves none of
-- them behind.
function files.make_dir(dir) C.check(lib.lw_dir_make(dir), "files.make_dir") end

-- Creates the directory dir, which must not exist (nor anything else at its name).
function files.make_new_dir(dir) C.check(lib.lw_dir_make_new(dir), "files.make_new_dir") end

-- Removes path and everything below it, never following a symbolic link (a link is removed
-- itself, its target untouched); a missing path is fine.
function files.remove_tree(path)
   C.check(lib.lw_path_remove_tree(path), "files.remove_tree")
end

-- The directory part of a path ("." for a bare name).
function files.dirname(path)
   return path:match("^(.*)/[^/]*$") or "."
end

-- Checks that a file can be written at path without touching what is there: the directory is
-- created if missing and a probe file is created and removed in it; an existing path must be a
-- regular file that opens for appending. Returns true, or nil and a message naming the path
-- ("what 'path' (of) ...": of, when given, says where the file comes from).
function files.check_writable(path, what, of)
   local named = ("%s '%s'%s"):format(what, path, of and (" (" .. of .. ")") or "")
   local function problem(fmt, ...) return nil, named .. " " .. fmt:format(...) end
   local ok, kind = pcall(files.kind, path)
   if not ok then return problem("cannot be inspected (%s)", kind) end
   if kind == "dir" then return problem("is a directory, not a file") end
   if kind == "other" then return problem("is not a regular file") end
   local dir = files.dirname(path)
   if lib.lw_dir_make(dir) ~= 0 then return problem("cannot be written: %s", C.last_error()) end
   if kind == "file" then
      local f, err = io.open(path, "ab")
      if f == nil then return problem("cannot be written (%s)", err) end
      f:close()
      return true
   end
   local f, err = io.open(path, "wb")
   if f == nil then return problem("cannot be created (%s)", err) end
   f:close()
   os.remove(path)
   return true
end

-- Checks that files can be created in dir (created with its parents if missing) with a probe
-- file named after tag. Returns true, or nil and a message naming the directory.
function files.check_writable_dir(dir, what, tag)
   if lib.lw_dir_make(dir) ~= 0 then
      return nil, ("%s '%s' cannot be created: %s"):format(what, dir, C.last_error())
   end
   -- created anew, never through a link someone left at the probe's name
   local probe = ("%s/.lwopt-probe-%s"):format(dir, tag or "0")
   if lib.lw_file_write(probe, nil, 0, nil) ~= 0 then
      return nil, ("%s '%s' is not writable (%s)"):format(what, dir,
         C.last_error():gsub("^files: ", ""))
   end
   os.remove(probe)
   return true
end

return files
