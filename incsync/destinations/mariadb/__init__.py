"""The MariaDB/MySQL destination kind (``kind: mariadb``, alias ``mysql``): one database per recipient."""
