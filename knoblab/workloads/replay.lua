-- knoblab's replay client: a replay plan's sessions played in sysbench's LuaJIT threads,
-- straight through the MariaDB C client library (libmariadb, which sysbench links), so that
-- the client costs the machine no more per statement than sysbench's own.
--
-- Run by knoblab.workloads.replay as `sysbench replay.lua --threads=N --time=0 --events=0 run`
-- with its set-up in the environment:
--   KNOBLAB_REPLAY_PLAN     the plan's folder (its record files)
--   KNOBLAB_REPLAY_OUT      a private folder: files.txt and sessions.bin in, figures out
--   KNOBLAB_REPLAY_SOCKET, KNOBLAB_REPLAY_USER, KNOBLAB_REPLAY_DATABASE (may be empty)
--   KNOBLAB_REPLAY_SPEED    "max" or "original"
--   KNOBLAB_REPLAY_PREPARED "0": what the application prepared runs as text too
--   KNOBLAB_REPLAY_UNTIL    seconds: a slice, each session ending at its first record after
--   KNOBLAB_REPLAY_MAX_PACKET the server's max_allowed_packet: said when a longer statement
--                           loses its connection
-- and in the private folder, reads.bin: a byte per class, 1 when it only reads.
-- Sessions are taken in order from sessions.bin (the plan's index: file, offset, length,
-- first, last, statements), the next one by whichever thread is free, through a counter in
-- the file `next` under flock. Each thread writes, as it goes, times-<thread>.bin (class,
-- seconds as float32 per statement) and, at speed original, late-<thread>.bin (seconds
-- behind the schedule, float64, per timed statement); at its end, thread-<thread>.txt:
--   began <ns> / ended <ns>           its monotonic clock at its first and last step
--   class <kind> <rows> <checksum> <unsent>
--   error <kind> <code> <count>
--   astext <kind> <count>             executions of a prepared statement run as text (the
--                                     server would not prepare it, its parameters did not fit,
--                                     or they were read in another sql_mode than the
--                                     connection's)
--   reprepared <kind> <count>         executions of a prepared statement whose columns had
--                                     changed (an ALTER TABLE): prepared again, and run again
--                                     when it only reads
--   use <code> <database, hex>        a USE that failed, with its error
--   fail <message>                    the replay cannot go on (the server went away, ...)
--   packet <kind> <bytes>             the statement it went away on, beyond max_allowed_packet
-- Rows are counted and summed alike whatever carried them (text, or a prepared statement's
-- binary rows, which libmariadb writes as the server writes text): each value whole, every
-- result of a statement (a procedure's too).

local ffi = require("ffi")
local bit = require("bit")
local C = ffi.C

ffi.cdef [[
typedef struct st_mysql MYSQL;
typedef struct st_mysql_res MYSQL_RES;
MYSQL *mysql_init(MYSQL *);
MYSQL *mysql_real_connect(MYSQL *, const char *, const char *, const char *, const char *,
                          unsigned int, const char *, unsigned long);
int mysql_options(MYSQL *, int, const void *);
char mariadb_get_info(MYSQL *, int, void *);
int mysql_real_query(MYSQL *, const char *, unsigned long);
unsigned int mysql_field_count(MYSQL *);
MYSQL_RES *mysql_store_result(MYSQL *);
char **mysql_fetch_row(MYSQL_RES *);
unsigned long *mysql_fetch_lengths(MYSQL_RES *);
unsigned int mysql_num_fields(MYSQL_RES *);
int mysql_next_result(MYSQL *);
unsigned int mysql_errno(MYSQL *);
const char *mysql_error(MYSQL *);
void mysql_free_result(MYSQL_RES *);
void mysql_close(MYSQL *);
uint32_t crc32(unsigned long, const char *, unsigned int);
typedef struct { int64_t sec; int64_t nsec; } knoblab_timespec;
int clock_gettime(int, knoblab_timespec *);
int clock_nanosleep(int, int, const knoblab_timespec *, knoblab_timespec *);
int open(const char *, int, int);
int flock(int, int);
long pread(int, void *, unsigned long, long);
long pwrite(int, const void *, unsigned long, long);
int close(int);
typedef struct __attribute__((packed)) { int32_t kind; uint32_t length; double offset; }
  knoblab_record;
typedef struct __attribute__((packed)) {
  int32_t file; int64_t offset; int64_t length; double first; double last; int64_t statements;
} knoblab_session;
typedef struct { int32_t kind; float seconds; } knoblab_time;
typedef struct __attribute__((packed)) {
  uint32_t kind; uint32_t number; uint32_t length; uint8_t backslashes;
} knoblab_execute;
typedef struct __attribute__((packed)) { char type; uint32_t length; } knoblab_parameter;
typedef struct st_mysql_stmt MYSQL_STMT;
/* libmariadb's MYSQL_BIND (mariadb_stmt.h), checked by its size below */
typedef struct {
  unsigned long *length; char *is_null; void *buffer; char *error; unsigned char *row_ptr;
  void *store_param_func; void *fetch_result; void *skip_result;
  unsigned long buffer_length; unsigned long offset; unsigned long length_value;
  unsigned int flags; unsigned int pack_length; int buffer_type;
  char error_value; char is_unsigned; char long_data_used; char is_null_value;
  void *extension;
} knoblab_bind;
MYSQL_STMT *mysql_stmt_init(MYSQL *);
int mysql_stmt_prepare(MYSQL_STMT *, const char *, unsigned long);
unsigned long mysql_stmt_param_count(MYSQL_STMT *);
char mysql_stmt_bind_param(MYSQL_STMT *, knoblab_bind *);
char mysql_stmt_bind_result(MYSQL_STMT *, knoblab_bind *);
int mysql_stmt_execute(MYSQL_STMT *);
int mysql_stmt_store_result(MYSQL_STMT *);
int mysql_stmt_fetch(MYSQL_STMT *);
int mysql_stmt_fetch_column(MYSQL_STMT *, knoblab_bind *, unsigned int, unsigned long);
unsigned int mysql_stmt_field_count(MYSQL_STMT *);
char mysql_stmt_free_result(MYSQL_STMT *);
int mysql_stmt_next_result(MYSQL_STMT *);
unsigned int mysql_stmt_errno(MYSQL_STMT *);
const char *mysql_stmt_error(MYSQL_STMT *);
char mysql_stmt_close(MYSQL_STMT *);
]]
assert(ffi.sizeof("knoblab_bind") == 112, "this libmariadb's MYSQL_BIND is not the one known")

local USE, TIMESTAMP, PREPARE, EXECUTE = -1, -2, -3, -4
-- MYSQL_TYPE_LONGLONG (signed and unsigned), _NEWDECIMAL, _DOUBLE and _STRING, by the
-- parameter's type in the plan
local BIND_TYPES = { [string.byte("i")] = 8, [string.byte("u")] = 8, [string.byte("d")] = 246,
                     [string.byte("f")] = 5, [string.byte("s")] = 254 }
local UNSIGNED = string.byte("u")
local STRING_TYPE = 254
local NO_DATA = 100 -- mysql_stmt_fetch: no more rows
local CELL = 256 -- bytes of a prepared statement's value read with its row; the rest after
local CLOCK_MONOTONIC, TIMER_ABSTIME = 1, 1
local O_RDWR, LOCK_EX, LOCK_UN = 2, 2, 8
local CLIENT_FLAGS = 65536 + 131072 -- CLIENT_MULTI_STATEMENTS | CLIENT_MULTI_RESULTS
local OPT_LOCAL_INFILE = 8 -- mysql_options: MYSQL_OPT_LOCAL_INFILE (mysql.h)
local SERVER_STATUS = 30 -- mariadb_get_info: MARIADB_CONNECTION_SERVER_STATUS (mysql.h)
local NO_BACKSLASH_ESCAPES = 512 -- SERVER_STATUS_NO_BACKSLASH_ESCAPES (mariadb_com.h)
-- An EXECUTE record's values were read with backslash escapes (else without; 0: either way).
local WITH_ESCAPES = 1
-- CR_NEW_STMT_METADATA: the statement's columns changed since it was prepared (ALTER TABLE)
local NEW_METADATA = 2057
-- The connection itself is gone: the server died or killed it.
local LOST = { [2006] = true, [2013] = true, [2055] = true, [1927] = true }
local STOPPED = 2 ^ 52 -- the counter's value once a thread failed: no session is taken after
local CHUNK = 1048576 -- bytes of a session's records read at once
local BUFFERED = 8192 -- statement times kept before they are written out (64 KiB a thread)
local STOP_EVERY = 1024 -- statements between two looks at the counter

local RECORD = ffi.sizeof("knoblab_record")
local EXECUTE_HEAD = ffi.sizeof("knoblab_execute")
local PARAMETER_HEAD = ffi.sizeof("knoblab_parameter")
local execute_ptr = ffi.typeof("const knoblab_execute *")
local parameter_ptr = ffi.typeof("const knoblab_parameter *")
local SESSION = ffi.sizeof("knoblab_session")
local record_ptr = ffi.typeof("const knoblab_record *")
local char_ptr = ffi.typeof("const char *")
-- mysql_fetch_lengths gives unsigned longs: read as 32-bit halves, the low one first (x86-64
-- and arm64 are little-endian), so that a length is a number rather than a boxed 64-bit value.
local lengths_ptr = ffi.typeof("const uint32_t *")

local plan = os.getenv("KNOBLAB_REPLAY_PLAN")
local out = os.getenv("KNOBLAB_REPLAY_OUT")
local socket = os.getenv("KNOBLAB_REPLAY_SOCKET")
local user = os.getenv("KNOBLAB_REPLAY_USER")
local database = os.getenv("KNOBLAB_REPLAY_DATABASE")
if database == "" then database = nil end
local original = os.getenv("KNOBLAB_REPLAY_SPEED") == "original"
-- Statements the application prepared are prepared again, unless told not to.
local use_prepared = os.getenv("KNOBLAB_REPLAY_PREPARED") ~= "0"
-- A slice of the capture: each session ends at its first record captured after this.
local slice_end = tonumber(os.getenv("KNOBLAB_REPLAY_UNTIL") or "")
local max_packet = tonumber(os.getenv("KNOBLAB_REPLAY_MAX_PACKET") or "")
-- The classes that only read, by their number: one of them may run twice.
local reads_only = {}
do
  local handle = assert(io.open(out .. "/reads.bin", "rb"))
  local flags = handle:read("*a") or ""
  handle:close()
  for kind = 0, #flags - 1 do reads_only[kind] = flags:byte(kind + 1) == 1 end
end
local no_local_files = ffi.new("unsigned int[1]", 0)
local server_status = ffi.new("unsigned int[1]")

local now_spec = ffi.new("knoblab_timespec")

local function now()
  C.clock_gettime(CLOCK_MONOTONIC, now_spec)
  return tonumber(now_spec.sec) * 1e9 + tonumber(now_spec.nsec)
end

local wait_spec = ffi.new("knoblab_timespec")

-- Sleeps until `due` (ns of the monotonic clock); how late it already was, in seconds.
local function wait_until(due)
  local late = now() - due
  if late >= 0 then return late / 1e9 end
  wait_spec.sec = math.floor(due / 1e9)
  wait_spec.nsec = due - tonumber(wait_spec.sec) * 1e9
  while C.clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, wait_spec, nil) ~= 0 do end
  return 0
end

-- The shared counter of sessions taken: the next one, or STOPPED.
local counter = C.open(out .. "/next", O_RDWR, 0)
assert(counter >= 0, "cannot open the session counter")
local taken = ffi.new("int64_t[1]")

local function counter_take(add, set)
  C.flock(counter, LOCK_EX)
  C.pread(counter, taken, 8, 0)
  local value = tonumber(taken[0])
  if set then taken[0] = set else taken[0] = value + add end
  C.pwrite(counter, taken, 8, 0)
  C.flock(counter, LOCK_UN)
  return value
end

-- The plan's record files, one name per line, numbered from 0 as its index counts them.
local files, count = {}, 0
for name in io.lines(out .. "/files.txt") do
  files[count] = name
  count = count + 1
end

local index = assert(io.open(out .. "/sessions.bin", "rb"))
local sessions = index:seek("end") / SESSION

local function session_at(number)
  index:seek("set", number * SESSION)
  local raw = index:read(SESSION)
  local s = ffi.cast("const knoblab_session *", raw)
  return { file = files[s.file], offset = tonumber(s.offset), length = tonumber(s.length),
           first = s.first }
end

-- A session's records, read in chunks: `next` gives kind, offset, pointer and length.
local Reader = {}
Reader.__index = Reader

local function reader(path, offset, length)
  local handle = assert(io.open(path, "rb"))
  handle:seek("set", offset)
  return setmetatable({ handle = handle, left = length, buf = "", pos = 0 }, Reader)
end

function Reader:fill(need)
  local have = #self.buf - self.pos
  if have >= need then return true end
  local want = math.min(math.max(need - have, CHUNK), self.left)
  if want <= 0 then return false end
  local piece = self.handle:read(want)
  if not piece then return false end
  self.left = self.left - #piece
  self.buf = self.buf:sub(self.pos + 1) .. piece
  self.pos = 0
  return #self.buf >= need
end

function Reader:next()
  if not self:fill(RECORD) then return nil end
  local head = ffi.cast(record_ptr, ffi.cast(char_ptr, self.buf) + self.pos)
  local kind, length, offset = head.kind, head.length, head.offset
  if not self:fill(RECORD + length) then return nil end
  local text = ffi.cast(char_ptr, self.buf) + self.pos + RECORD
  self.pos = self.pos + RECORD + length
  return kind, offset, text, length
end

function Reader:close()
  self.handle:close()
end

function thread_run(thread_id)
  local began = now()
  local times = ffi.new("knoblab_time[?]", BUFFERED)
  local timed = 0
  local times_file = assert(io.open(string.format("%s/times-%d.bin", out, thread_id), "wb"))
  local late_file = original and
      assert(io.open(string.format("%s/late-%d.bin", out, thread_id), "wb"))
  local lates = original and ffi.new("double[?]", BUFFERED)
  local late_count = 0
  local rows, sums, unsent, errors, uses = {}, {}, {}, {}, {}
  local rows_seen = 0 -- rows of the statement being read
  local as_text = {} -- executions of a prepared statement the server would not prepare
  local reprepared = {} -- executions whose statement was prepared again (its columns changed)
  local failure = nil
  local oversized = nil -- the statement whose connection was dropped, beyond max_allowed_packet
  local since_look = 0

  local function flush()
    if timed > 0 then
      times_file:write(ffi.string(times, timed * 8))
      timed = 0
    end
    if late_count > 0 then
      late_file:write(ffi.string(lates, late_count * 8))
      late_count = 0
    end
  end

  local function count_error(kind, code)
    local of = errors[kind]
    if not of then
      of = {}
      errors[kind] = of
    end
    of[code] = (of[code] or 0) + 1
  end

  -- A row's checksum takes each value's bytes then its length (4 bytes, the low ones), a
  -- NULL a byte of its own: the same for a row of text and for one a prepared statement
  -- read, so that the protocol that carried the rows never shows as rows that differ.
  local function add_row(sum, crc)
    rows_seen = rows_seen + 1
    return (sum + crc) % STOPPED
  end

  -- Every result of the statement just sent: rows, and their checksum (a sum of per-row
  -- CRCs, so that the order rows come in does not change it); 0, or the error that ended
  -- its results (a later statement of several, rows the library could not read).
  local function results(conn, kind)
    local sum, code = 0, 0
    rows_seen = 0
    while true do
      local result = C.mysql_store_result(conn)
      if result ~= nil then
        local fields = C.mysql_num_fields(result)
        while true do
          local row = C.mysql_fetch_row(result)
          if row == nil then break end
          local lengths = ffi.cast(lengths_ptr, C.mysql_fetch_lengths(result))
          local crc = 0
          for i = 0, fields - 1 do
            local value = row[i]
            if value == nil then
              crc = C.crc32(crc, "\1", 1)
            else
              crc = C.crc32(crc, value, lengths[2 * i])
              crc = C.crc32(crc, ffi.cast(char_ptr, lengths + 2 * i), 4)
            end
          end
          sum = add_row(sum, crc)
        end
        C.mysql_free_result(result)
      elseif C.mysql_field_count(conn) > 0 then
        code = C.mysql_errno(conn)
        break
      end
      local more = C.mysql_next_result(conn)
      if more ~= 0 then
        if more > 0 then code = C.mysql_errno(conn) end
        break
      end
    end
    rows[kind] = (rows[kind] or 0) + rows_seen
    sums[kind] = ((sums[kind] or 0) + sum) % STOPPED
    return code
  end

  -- Where a prepared statement's values are read into: a cell of CELL bytes per column (a
  -- longer value's rest is fetched after, into `rest`), grown to the widest result seen.
  local cells, sizes, nulls, binds, width = nil, nil, nil, nil, 0
  local rest, rest_size = nil, 0
  local rest_bind = ffi.new("knoblab_bind[1]")
  local rest_length = ffi.new("unsigned long[1]")
  local rest_null = ffi.new("char[1]")

  local function result_binds(fields)
    if fields > width then
      width = fields
      cells = ffi.new("char[?]", fields * CELL)
      sizes = ffi.new("unsigned long[?]", fields)
      nulls = ffi.new("char[?]", fields)
      binds = ffi.new("knoblab_bind[?]", fields)
      for i = 0, fields - 1 do
        local bind = binds[i]
        bind.buffer_type = STRING_TYPE
        bind.buffer = cells + i * CELL
        bind.buffer_length = CELL
        bind.length = sizes + i
        bind.is_null = nulls + i
      end
    end
    return binds
  end

  -- The bytes of a value beyond its cell, added to the row's CRC.
  local function value_rest(stmt, column, crc, size)
    local left = size - CELL
    if left > rest_size then
      rest_size = math.max(left, 2 * rest_size)
      rest = ffi.new("char[?]", rest_size)
    end
    local bind = rest_bind[0]
    bind.buffer_type = STRING_TYPE
    bind.buffer = rest
    bind.buffer_length = left
    bind.length = rest_length
    bind.is_null = rest_null
    if C.mysql_stmt_fetch_column(stmt, rest_bind, column, CELL) ~= 0 then return nil end
    return C.crc32(crc, rest, left)
  end

  -- A prepared statement's current result read (its values as text, as libmariadb writes
  -- them from the binary protocol): its checksum added to `sum`; 0, or the error.
  local function stored_rows(stmt, fields, sum)
    if C.mysql_stmt_bind_result(stmt, result_binds(fields)) ~= 0 or
        C.mysql_stmt_store_result(stmt) ~= 0 then
      return C.mysql_stmt_errno(stmt), sum
    end
    local lengths = ffi.cast(lengths_ptr, sizes)
    while true do
      local got = C.mysql_stmt_fetch(stmt)
      if got == NO_DATA then break end
      if got == 1 then return C.mysql_stmt_errno(stmt), sum end
      -- else 0, or MYSQL_DATA_TRUNCATED: a value longer than its cell, read whole below
      local crc = 0
      for i = 0, fields - 1 do
        if nulls[i] ~= 0 then
          crc = C.crc32(crc, "\1", 1)
        else
          local size = lengths[2 * i]
          if size <= CELL then
            crc = C.crc32(crc, cells + i * CELL, size)
          else
            crc = value_rest(stmt, i, C.crc32(crc, cells + i * CELL, CELL), size)
            if crc == nil then return C.mysql_stmt_errno(stmt), sum end
          end
          crc = C.crc32(crc, ffi.cast(char_ptr, lengths + 2 * i), 4)
        end
      end
      sum = add_row(sum, crc)
    end
    C.mysql_stmt_free_result(stmt)
    return 0, sum
  end

  -- A statement the application prepared, prepared again on this connection (untimed, as
  -- the application's own Prepare is no statement of the capture): its handle and its
  -- parameters' bindings; or the server's error, when it refused it (its executions then
  -- run as text).
  local function prepare(conn, text, length)
    local stmt = C.mysql_stmt_init(conn)
    if C.mysql_stmt_prepare(stmt, text, length) ~= 0 then
      local code = C.mysql_stmt_errno(stmt)
      C.mysql_stmt_close(stmt)
      return { failed = code }
    end
    local count = tonumber(C.mysql_stmt_param_count(stmt))
    return { stmt = stmt, count = count, text = ffi.string(text, length),
             params = ffi.new("knoblab_bind[?]", math.max(count, 1)),
             lengths = ffi.new("unsigned long[?]", math.max(count, 1)) }
  end

  -- The parameters of one execution bound where they lie in the record; false when they do
  -- not match the statement (it then runs as text).
  local function bind(entry, at, stop)
    local i = 0
    while at < stop do
      if i >= entry.count then return false end
      local head = ffi.cast(parameter_ptr, at)
      local length = head.length
      local param = entry.params[i]
      param.buffer_type = BIND_TYPES[head.type] or STRING_TYPE
      param.is_unsigned = head.type == UNSIGNED and 1 or 0
      param.buffer = ffi.cast("void *", at + PARAMETER_HEAD)
      param.buffer_length = length
      entry.lengths[i] = length
      param.length = entry.lengths + i
      at = at + PARAMETER_HEAD + length
      i = i + 1
    end
    return i == entry.count and (i == 0 or C.mysql_stmt_bind_param(entry.stmt, entry.params) == 0)
  end

  -- A prepared statement executed and every result it gave read: 0, or the error code.
  local function run(entry, kind)
    local stmt = entry.stmt
    if C.mysql_stmt_execute(stmt) ~= 0 then return C.mysql_stmt_errno(stmt) end
    local sum, code = 0, 0
    rows_seen = 0
    while true do
      local fields = C.mysql_stmt_field_count(stmt)
      if fields > 0 then
        code, sum = stored_rows(stmt, fields, sum)
        if code ~= 0 then break end
      end
      local more = C.mysql_stmt_next_result(stmt) -- a procedure's further results
      if more ~= 0 then
        if more > 0 then code = C.mysql_stmt_errno(stmt) end
        break
      end
    end
    rows[kind] = (rows[kind] or 0) + rows_seen
    sums[kind] = ((sums[kind] or 0) + sum) % STOPPED
    return code
  end

  -- An execution of a prepared statement: 0, or the error code. When the statement's
  -- columns changed since it was prepared (an ALTER TABLE), a driver reads the new ones;
  -- libmariadb cannot, and drops the result: the statement is prepared again (counted), and
  -- one that only reads runs again; one that writes has done its work, its rows unread.
  local function execute(conn, entry, kind, at, stop)
    local code = run(entry, kind)
    if code ~= NEW_METADATA then return code end
    C.mysql_stmt_close(entry.stmt) -- reads what the server sent, and drops it
    reprepared[kind] = (reprepared[kind] or 0) + 1
    local again = prepare(conn, entry.text, #entry.text)
    entry.stmt, entry.failed = again.stmt, again.failed
    if again.failed then return again.failed end
    entry.count, entry.params, entry.lengths = again.count, again.params, again.lengths
    if not bind(entry, at, stop) then return code end
    return reads_only[kind] and run(entry, kind) or 0
  end

  local function play(session, zero)
    if original and session.first == session.first then
      wait_until(zero + session.first * 1e9)
    end
    local conn = C.mysql_init(nil)
    -- A replayed LOAD DATA LOCAL INFILE must never make this client send a file of this
    -- machine: libmariadb would, when the server asks for it.
    C.mysql_options(conn, OPT_LOCAL_INFILE, no_local_files)
    if C.mysql_real_connect(conn, nil, user, "", database, 0, socket, CLIENT_FLAGS) == nil then
      failure = string.format("the replay could not connect: (%d) %s", C.mysql_errno(conn),
                              ffi.string(C.mysql_error(conn)))
      C.mysql_close(conn)
      return false
    end
    local records = reader(plan .. "/" .. session.file, session.offset, session.length)
    -- The error of the last USE, when it failed: the connection is not in the statements'
    -- database, and they must not run in another one.
    local unusable = nil
    local ok = true
    local prepared, numbered = {}, 0 -- the session's prepared statements, by their number
    while true do
      local kind, offset, text, length = records:next()
      if kind == nil or (slice_end and offset > slice_end) then break end
      if kind == PREPARE then
        if use_prepared then prepared[numbered] = prepare(conn, text, length) end
        numbered = numbered + 1
        goto next_record
      end
      if original and offset == offset then
        lates[late_count] = wait_until(zero + offset * 1e9)
        late_count = late_count + 1
        if late_count == BUFFERED then flush() end
      end
      do
        local name, entry, values, stop = nil, nil, nil, nil
        if kind == USE then
          name = ffi.string(text, length)
          local sql = "USE `" .. name:gsub("`", "``") .. "`"
          text, length = sql, #sql
        elseif kind == TIMESTAMP then
          local sql = "SET timestamp = " .. ffi.string(text, length)
          text, length = sql, #sql
        elseif kind == EXECUTE then
          local head = ffi.cast(execute_ptr, text)
          local statement = text + EXECUTE_HEAD
          local read = head.backslashes
          stop = text + length
          kind, text, length = head.kind, statement, head.length
          values = statement + head.length
          entry = prepared[head.number]
          if entry and read ~= 0 then
            -- Its values were read from the text in one sql_mode: in the other, the text
            -- means other values, and it runs as text.
            C.mariadb_get_info(conn, SERVER_STATUS, server_status)
            local escapes = bit.band(server_status[0], NO_BACKSLASH_ESCAPES) == 0
            if escapes ~= (read == WITH_ESCAPES) then entry = false end
          end
          if entry == false or (entry and (entry.failed or not bind(entry, values, stop))) then
            as_text[kind] = (as_text[kind] or 0) + 1
            entry = nil
          end
        end
        if unusable and kind ~= USE then
          count_error(kind, unusable)
          unsent[kind] = (unsent[kind] or 0) + 1
        else
          local start = now()
          local code = 0
          if entry then
            code = execute(conn, entry, kind, values, stop)
          elseif C.mysql_real_query(conn, text, length) == 0 then
            code = results(conn, kind)
          else
            code = C.mysql_errno(conn)
          end
          if code == 0 then
            if kind == USE then unusable = nil end
          else
            if LOST[code] then
              failure = string.format("the server dropped a replay connection: (%d) %s", code,
                                      entry and entry.stmt and
                                      ffi.string(C.mysql_stmt_error(entry.stmt)) or
                                      ffi.string(C.mysql_error(conn)))
              if max_packet and length >= max_packet then
                -- The server drops the connection a packet beyond its limit comes on.
                oversized = string.format("packet %d %d", kind, length)
              end
              ok = false
              break
            end
            count_error(kind, code)
            if kind == USE then
              uses[name] = code
              unusable = code
            end
            rows[kind] = rows[kind] or 0
          end
          times[timed].kind = kind
          times[timed].seconds = (now() - start) / 1e9
          timed = timed + 1
          if timed == BUFFERED then flush() end
        end
      end
      since_look = since_look + 1
      if since_look == STOP_EVERY then
        since_look = 0
        if counter_take(0) >= STOPPED then break end
      end
      ::next_record::
    end
    records:close()
    for _, entry in pairs(prepared) do
      if entry.stmt then C.mysql_stmt_close(entry.stmt) end
    end
    C.mysql_close(conn)
    return ok
  end

  while true do
    local number = counter_take(1)
    if number >= sessions then break end
    if not play(session_at(number), began) then
      counter_take(0, STOPPED)
      break
    end
  end
  flush()
  times_file:close()
  if late_file then late_file:close() end

  local lines = { string.format("began %d", began), string.format("ended %d", now()) }
  for kind, n in pairs(rows) do
    lines[#lines + 1] = string.format("class %d %d %d %d", kind, n, sums[kind] or 0,
                                      unsent[kind] or 0)
  end
  for kind, n in pairs(unsent) do
    if not rows[kind] then lines[#lines + 1] = string.format("class %d 0 0 %d", kind, n) end
  end
  for kind, n in pairs(as_text) do
    lines[#lines + 1] = string.format("astext %d %d", kind, n)
  end
  for kind, n in pairs(reprepared) do
    lines[#lines + 1] = string.format("reprepared %d %d", kind, n)
  end
  for kind, codes in pairs(errors) do
    for code, n in pairs(codes) do
      lines[#lines + 1] = string.format("error %d %d %d", kind, code, n)
    end
  end
  for name, code in pairs(uses) do
    lines[#lines + 1] = string.format("use %d %s", code,
                                      (name:gsub(".", function(c)
                                        return string.format("%02x", c:byte())
                                      end)))
  end
  if failure then lines[#lines + 1] = "fail " .. failure:gsub("\n", " ") end
  if oversized then lines[#lines + 1] = oversized end
  local summary = assert(io.open(string.format("%s/thread-%d.txt", out, thread_id), "w"))
  summary:write(table.concat(lines, "\n"), "\n")
  summary:close()
end

-- sysbench asks for an event function; thread_run above never calls it.
function event()
end
