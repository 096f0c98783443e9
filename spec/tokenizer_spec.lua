-- tokenizer_spec.lua: lwopt.tokenizer against tokenizer files the spec writes in llm.c's format
-- (helpers.tokenizer_file): versions 1 and 2, decoding, and each kind of bad file named; a BPE
-- tokenizer's files handed to lwopt.bpe.
local helpers = require("helpers")
local tokenizer = require("lwopt.tokenizer")

local PIECES = { "Hello", ",", " world", "!", "\n", "\xc3", "\xa9", "<|endoftext|>" }

-- The message tokenizer.load raises for the file at path.
local function load_error(path)
   local ok, err = pcall(tokenizer.load, path)
   assert.is_false(ok)
   return err
end

describe("lwopt.tokenizer", function()
   local keep = helpers.temp_paths(after_each)
   local function file(pieces, opts) return keep(helpers.tokenizer_file(pieces, opts)) end

   it("reads a version 2 file: its size, end-of-text id and every token's bytes", function()
      local t = tokenizer.load(file(PIECES, { eot = 7 }))
      assert.same({ 2, 8, 7 }, { t.version, t.vocab, t.eot })
      assert.equal("Hello", t.pieces[0])
      assert.equal("<|endoftext|>", t.pieces[7])
   end)

   it("decodes ids into text, a character split over two tokens whole again", function()
      local t = tokenizer.load(file(PIECES))
      assert.equal("Hello, world!\n", t:decode({ 0, 1, 2, 3, 4 }))
      assert.equal("caf\xc3\xa9<|endoftext|>", "caf" .. t:decode({ 5, 6, 7 }))
      assert.equal("", t:decode({}))
   end)

   it("reads version 1, whose end-of-text token is GPT-2's when the vocabulary holds it",
      function()
         local t = tokenizer.load(file(PIECES, { version = 1, eot = 0 }))
         assert.same({ 1, 8 }, { t.version, t.vocab })
         assert.is_nil(t.eot) -- 8 tokens: no id 50256
      end)

   it("names an id outside the vocabulary", function()
      local path = file(PIECES)
      local t = tokenizer.load(path)
      local ok, err = pcall(t.decode, t, { 0, 8 })
      assert.is_false(ok)
      assert.equal("tokenizer: " .. path .. ": token 8 is outside its vocabulary [0, 8)", err)
   end)

   it("refuses a bad magic, naming it and the format", function()
      local path = file(PIECES, { magic = 20240520 })
      assert.equal("tokenizer: " .. path .. ": magic 20240520, not 20240328: not a tokenizer file "
         .. "in llm.c's format (gpt2_tokenizer.bin)", load_error(path))
   end)

   it("refuses a version it does not read", function()
      local path = file(PIECES, { version = 3 })
      assert.equal("tokenizer: " .. path .. ": version 3; this reader takes versions 1 and 2",
         load_error(path))
   end)

   it("refuses a file cut short, in the header or in a token", function()
      local path = keep(helpers.tempfile("short"))
      assert.equal("tokenizer: " .. path .. ": has 5 bytes, less than the 1024-byte header: "
         .. "truncated, or not a tokenizer file", load_error(path))
      -- the last token's 13 bytes cut to 10: the file ends inside token 7
      path = file(PIECES, { cut = 3 })
      assert.equal("tokenizer: " .. path .. ": truncated: it ends in token 7 of the 8 its header "
         .. "counts (at byte " .. (1024 + 8 + 5 + 1 + 6 + 1 + 1 + 1 + 1 + 10) .. ")",
         load_error(path))
      -- a header that counts more tokens than the file holds
      path = file(PIECES, { vocab = 9 })
      assert.matches("truncated: it ends in token 8 of the 9 its header counts", load_error(path),
         1, true)
   end)

   it("refuses bytes after the last token, a token of no bytes and an end-of-text id outside",
      function()
         local path = file(PIECES, { vocab = 7, eot = 6 })
         assert.equal("tokenizer: " .. path .. ": 14 bytes after the last of the 7 tokens its "
            .. "header counts: another vocabulary size?", load_error(path))
         path = file({ "a", "", "b" })
         assert.equal("tokenizer: " .. path .. ": token 1 has no bytes (its length is 0)",
            load_error(path))
         path = file(PIECES, { eot = 8 })
         assert.equal("tokenizer: " .. path .. ": the end-of-text token 8 is not below the "
            .. "vocabulary size 8", load_error(path))
      end)

   it("hands a BPE tokenizer's files to lwopt.bpe, which encodes too", function()
      local root = assert(io.popen("pwd")):read("*l")
      local fixtures = root .. "/spec/fixtures/bpe"
      for _, path in ipairs({ fixtures .. "/gpt2", fixtures .. "/gpt2/merges.txt",
         fixtures .. "/hf/tokenizer.json" }) do
         local t = tokenizer.load(path)
         assert.same({ 266, 265 }, { t.vocab, t.eot })
         assert.equal("the cat", t:decode(t:encode("the cat")))
      end
   end)

   it("names a file that cannot be read", function()
      assert.matches("^tokenizer: /nonexistent/t%.bin: cannot be read %(",
         load_error("/nonexistent/t.bin"))
   end)
end)
