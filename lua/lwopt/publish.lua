-- publish.lua: a directory of files replaced whole (`lwopt export`'s OUT_DIR): the new files are
-- written into a staging directory beside it and made durable, then swapped in by one atomic
-- exchange of the two names, so that after a failure or a kill at any moment the directory holds
-- what it held before or everything it is meant to hold, never a mix. Files of the old directory
-- that the new one does not write (a user's tokenizer files) are carried over; a directory that
-- holds more than files is refused. It writes none of the files itself.
local ffi = require("ffi")
local C = require("lwopt.C")
local files = require("lwopt.files")
local errors = require("lwopt.errors")

local lib = C.lib
local publish = {}

local fail = errors.failer(nil)

-- The C library's last error in the user's words (without "files: ").
local function why() return errors.plain(C.last_error()) end

local AT_FDCWD, RENAME_EXCHANGE = -100, 2
local ENOSYS, EINVAL = 38, 22

local kind_cell = ffi.new("lw_path_kind[1]")

-- What the directory entry at path is, a symbolic link not followed: "missing", "file", "dir",
-- "other" or "link".
local function entry_kind(path)
   if lib.lw_path_entry_kind(path, kind_cell) ~= 0 then fail("%s", why()) end
   return C.name("path_kind", kind_cell[0])
end

-- Removes path and everything below it, never following a symbolic link; a missing path is fine.
-- Returns true, or false and why not.
local function remove_tree(path)
   if lib.lw_path_remove_tree(path) ~= 0 then return false, why() end
   return true
end

local function rename(from, to)
   if lib.lw_path_rename(from, to) ~= 0 then return false, why() end
   return true
end

-- Exchanges the directories at a and b in one step (Linux's renameat2 with RENAME_EXCHANGE):
-- true; false when the kernel, the C library or the file system cannot (ENOSYS, no renameat2,
-- EINVAL); raises on any other error. A field, so that a spec can stand in for a file system
-- that refuses.
function publish.exchange(a, b)
   local found, renameat2 = pcall(function() return C.libc.renameat2 end)
   if not found then return false end
   if renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) == 0 then return true end
   local e = ffi.errno()
   if e == EINVAL or e == ENOSYS then return false end
   fail("cannot exchange %s with %s: %s", a, b, ffi.string(C.libc.strerror(e)))
end

-- A copy of the regular file from at to (written anew, fsynced), for a file system that refuses
-- hard links.
local function copy(from, to)
   local data, n = ffi.new("void*[1]"), ffi.new("int64_t[1]")
   if lib.lw_file_read(from, 2 ^ 53, false, data, n) ~= 0 then return false, why() end
   local status = lib.lw_file_write(to, data[0], n[0], nil)
   local message = status ~= 0 and why() or nil
   lib.lw_file_read_free(data[0])
   return status == 0, message
end

-- The old directory's entries that write did not write, made entries of the staging directory:
-- hard links (a symbolic link linked as the link it is), else copies.
local function carry_over(old, stage, carried, shown)
   for _, e in ipairs(carried) do
      local from, to = old .. "/" .. e.name, stage .. "/" .. e.name
      if entry_kind(to) == "missing" and C.libc.link(from, to) ~= 0 then
         local reason = ffi.string(C.libc.strerror(ffi.errno()))
         if e.kind ~= "file" then
            fail("cannot carry %s/%s over into the new %s: %s", shown, e.name, shown, reason)
         end
         local ok, message = copy(from, to)
         if not ok then
            fail("cannot carry %s/%s over into the new %s: %s", shown, e.name, shown, message)
         end
      end
   end
end

-- The entries of the directory at real to carry over: { name, kind = "file" | "link" }. A
-- directory or anything else than a file there is refused: carrying it over would need a copy
-- of a whole tree, and removing it with the old contents would lose it.
local function entries_to_carry(real, shown)
   local carried = {}
   for _, name in ipairs(files.list(real)) do
      local kind = entry_kind(real .. "/" .. name)
      if kind == "dir" then
         fail("%s holds the directory '%s': it is replaced whole and only its files are carried "
            .. "over; move '%s' out or choose another directory", shown, name, name)
      elseif kind ~= "file" and kind ~= "link" then
         fail("%s holds '%s', which is not a regular file: it is replaced whole and only its "
            .. "files are carried over; move '%s' out or choose another directory", shown, name,
            name)
      end
      carried[#carried + 1] = { name = name, kind = kind }
   end
   return carried
end

-- publish.dir(dir, write): replaces the directory at dir (created with its parents if missing)
-- by the files write(stage) writes into stage, a new directory beside dir, and the files of dir
-- that write did not write. Until the exchange dir is untouched; after it dir holds the new
-- files, and the old contents are removed. A symbolic link at dir stays: the directory it names
-- is replaced. Before write runs it refuses, in one line without a place (the caller's), a dir
-- that is not a directory, holds a directory or a FIFO, device or socket, or is or holds the
-- current directory; write's own errors come through as they are. Two publishes of one dir at
-- once are not supported: they share the staging name.
function publish.dir(dir, write)
   local shown = dir
   local path = dir:gsub("(.)/+$", "%1") -- "out/" is "out"
   if path == "" then fail("the directory to write is an empty path") end
   local ok, kind = pcall(files.kind, path)
   if not ok then fail("%s", errors.plain(tostring(kind))) end
   if kind ~= "missing" and kind ~= "dir" then fail("%s exists and is not a directory", shown) end
   local real = files.real_path(path)
   local parent, name = real:match("^(.*)/([^/]+)$")
   if name == nil then fail("%s is the root directory, which cannot be replaced", shown) end
   if parent == "" then parent = "/" end
   local cwd = files.real_path(".")
   if cwd == real or cwd:sub(1, #real + 1) == real .. "/" then
      fail("%s is the current directory or holds it: it is replaced whole, which would leave "
         .. "this process and its shell in a removed directory; run from elsewhere", shown)
   end
   -- dot-names beside dir that say what they are; a kill leaves them behind, and the next
   -- publish removes them
   local stage = ("%s/.%s.lwopt-staging"):format(parent, name)
   local aside = ("%s/.%s.lwopt-old"):format(parent, name)
   if kind == "missing" and entry_kind(aside) == "dir" then
      -- a publish without the exchange was killed between its two renames: the old directory
      -- whole, renamed aside; it goes back before anything else
      local back, message = rename(aside, real)
      if not back then
         fail("%s is missing and its previous contents are in %s: %s", shown, aside, message)
      end
      kind = "dir"
   end
   local carried = kind == "dir" and entries_to_carry(real, shown) or {}
   if lib.lw_dir_make(parent) ~= 0 then fail("%s cannot be created: %s", shown, why()) end
   for _, leftover in ipairs({ stage, kind == "dir" and aside or nil }) do
      local removed, message = remove_tree(leftover)
      if not removed then fail("%s cannot be written: %s", shown, message) end
   end
   if lib.lw_dir_make_new(stage) ~= 0 then
      -- a parent that takes no new name, though dir itself may be writable: said, as the cause
      fail("%s cannot be written: %s (its new files are written beside it first)", shown, why())
   end
   local written, err = pcall(function()
      write(stage)
      carry_over(real, stage, carried, shown)
      -- the names in the staging directory durable before it becomes dir
      if lib.lw_dir_sync(stage) ~= 0 then fail("%s cannot be written: %s", shown, why()) end
   end)
   if written and kind == "missing" then
      local message
      written, message = rename(stage, real)
      err = message and ("%s cannot be written: %s"):format(shown, message)
   elseif written then
      written, err = pcall(publish.exchange, stage, real)
      if written and err == false then
         -- The file system cannot exchange two names (some network and FUSE file systems): the
         -- old directory is renamed aside, then the new one into its place. A kill between the
         -- two renames leaves dir missing and its old contents whole at `aside`, which the next
         -- publish renames back first; nothing is ever a mix of old and new files.
         local message
         written, message = rename(real, aside)
         if written then
            written, message = rename(stage, real)
            if not written then rename(aside, real) end
         end
         err = message and ("%s cannot be written: %s"):format(shown, message)
      end
   end
   if not written then
      remove_tree(stage)
      errors.raise(err)
   end
   -- the exchange durable; then the old contents (at the staging name, or aside) go
   lib.lw_dir_sync(parent)
   remove_tree(stage)
   remove_tree(aside)
end

return publish
