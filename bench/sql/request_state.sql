-- qtg-bench: where one movement is.
SELECT /* qtg-bench */ request_state FROM movement_requests WHERE id = %(id)s
