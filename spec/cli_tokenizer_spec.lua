-- cli_tokenizer_spec.lua: `lwopt tokenizer train|encode|decode` as a user runs them: a
-- tokenizer trained on a small text and its line, ids from arguments and stdin, text back from
-- ids, special tokens as ids or as text, and the errors: usage (status 2) and bad input named
-- in one line (status 1).
local helpers = require("helpers")

local root = assert(io.popen("pwd")):read("*l")
local bin = root .. "/bin/lwopt"

-- Runs the command from /tmp; its stdout, stderr and status.
local function lwopt(args) return helpers.sh_apart("cd /tmp && " .. bin .. " " .. args) end

describe("lwopt tokenizer", function()
   local dir
   before_each(function() dir = helpers.tempdir() end)
   after_each(function() helpers.sh("rm -rf " .. dir) end)

   -- A tokenizer trained on a small text in dir: its path.
   local function trained()
      local text = helpers.tempfile(("the cat sat on the mat; the cat ate. "):rep(10))
      local out, err, status = lwopt("tokenizer train " .. text .. " --vocab 280 --out " .. dir
         .. "/tok.json")
      os.remove(text)
      assert.equal(0, status, err)
      return dir .. "/tok.json", out
   end

   it("is listed by lwopt help, with its commands' flags in their --help", function()
      local out, status = helpers.sh(bin .. " help")
      assert.equal(0, status)
      assert.matches("\n  tokenizer train|encode|decode\n", out, 1, true)
      for _, c in ipairs({ "train", "encode", "decode" }) do
         out, status = helpers.sh(bin .. " tokenizer " .. c .. " --help")
         assert.equal(0, status)
         assert.matches("^usage: lwopt tokenizer " .. c, out)
      end
   end)

   it("trains a tokenizer and says what it learnt, how fast, and when it ran out of pairs",
      function()
         local path, out = trained()
         -- chunks: "the", then " cat" ... "." ten times over, and the last " "
         assert.matches("^trained " .. path:gsub("%p", "%%%0") .. ": 271 tokens %(256 bytes, 14 "
            .. "merges, 1 special%) from 1 file, 370 bytes %(111 chunks, 10 distinct%), in "
            .. "[%d.]+ s: [%d.]+ s reading and counting, [%d.]+ s merging %([%d]+ merges/s%)\n"
            .. "note: 14 merges of the 23 asked: no other pair is seen 2 times "
            .. "%(%-%-min%-count%)\n$", out)
         assert.matches('^{\n  "format": "lwopt%-bpe",', helpers.slurp(path))
      end)

   it("encodes arguments or stdin into ids and decodes them back", function()
      local path = trained()
      local ids, err, status = lwopt("tokenizer encode --tokenizer " .. path .. " the cat ate")
      assert.equal(0, status, err)
      assert.matches("^[%d ]+\n$", ids)
      local piped = helpers.sh_apart("printf 'the cat ate' | " .. bin .. " tokenizer encode "
         .. "--tokenizer " .. path)
      assert.equal(ids, piped)
      local text = lwopt("tokenizer decode --tokenizer " .. path .. " " .. ids)
      assert.equal("the cat ate", text)
      text = helpers.sh_apart("echo '" .. ids:gsub(" ", ","):gsub("\n", "") .. "' | " .. bin
         .. " tokenizer decode --tokenizer " .. path)
      assert.equal("the cat ate", text)
      -- a special token's text is its id, or text with --plain
      local eot = lwopt("tokenizer encode --tokenizer " .. path .. " '<|endoftext|>'")
      assert.equal("270\n", eot)
      local plain = lwopt("tokenizer encode --plain --tokenizer " .. path .. " '<|endoftext|>'")
      assert.is_true(#plain > 4)
      assert.equal("<|endoftext|>", (lwopt("tokenizer decode --tokenizer " .. path .. " "
         .. plain)))
   end)

   it("says what is wrong: usage with status 2, bad input in one line with status 1", function()
      local path = trained()
      for _, case in ipairs({
         { "tokenizer", "usage: lwopt tokenizer train|encode|decode", 2, "out" },
         { "tokenizer frobnicate", "lwopt: unknown tokenizer command 'frobnicate'", 2 },
         { "tokenizer train x.txt --vocab 300", "lwopt tokenizer train: train needs --out FILE "
           .. "(lwopt tokenizer train --help lists the flags)\n", 2 },
         { "tokenizer train --vocab 300 --out t.json", "train needs one or more TEXT files", 2 },
         { "tokenizer encode hello", "lwopt tokenizer encode: needs --tokenizer T", 2 },
         { "tokenizer encode --tokenizr t hello", "unknown flag --tokenizr (did you mean "
           .. "--tokenizer?)", 2 },
         { "tokenizer train /nonexistent/x.txt --vocab 300 --out " .. dir .. "/t.json",
           "lwopt tokenizer train: cannot open /nonexistent/x.txt: No such file or directory\n",
           1 },
         { "tokenizer train " .. path .. " --vocab 200 --out " .. dir .. "/t.json",
           "lwopt tokenizer train: vocab 200 is smaller than the 256 byte tokens and the 1 "
           .. "special token\n", 1 },
         { "tokenizer encode --tokenizer /nonexistent/t.json hi",
           "lwopt tokenizer encode: tokenizer: /nonexistent/t.json: not found\n", 1 },
         { "tokenizer decode --tokenizer " .. path .. " 1 x", "lwopt tokenizer decode: 'x' is not "
           .. "a token id\n", 1 },
         { "tokenizer decode --tokenizer " .. path .. " 1 271", "lwopt tokenizer decode: "
           .. "tokenizer: " .. path .. ": token 271 (at 1) is outside its vocabulary [0, 271)\n",
           1 },
      }) do
         local out, err, status = lwopt(case[1] .. " < /dev/null")
         assert.equal(case[3], status, case[1])
         assert.matches(case[2], case[4] and out or err, 1, true)
      end
   end)
end)
