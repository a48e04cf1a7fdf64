"""PostgreSQL and MySQL/MariaDB over Spark JDBC: reaching the database, the column types it is read
in, its safe horizon, and driver errors in one readable line.
"""
