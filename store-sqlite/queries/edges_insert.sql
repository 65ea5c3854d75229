-- ?1 JSON array of [waiter, target, state, code, status] arrays: the
-- edges of the jobs an add stored with dependencies, 'p' pending (a live
-- target), 'h' held (an archived target that did not end ok, under the
-- policy 'hold') or 'd' done, with an archived target's code and status. A
-- waiter is new, so no edge of it exists; a conflict fails the add.
INSERT INTO edges (waiter, target, state, code, status)
SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4 FROM json_each(?1)
