"""Writes a small shop's database as mariadb-dump --databases would: the data of
examples/dump-script.toml, made here so that no third-party data is needed.

    .venv/bin/python scripts/shop_dump.py examples/shop.sql.gz [--orders 300000]

Tables customers, products and orders (InnoDB, with keys), a view, a trigger and a stored
procedure whose DEFINER is an account the dump does not create (as in a dump taken from a
production server). The rows are drawn from a fixed seed: the same
file every time. `.gz` or `.zst` at the end of the name compresses it (zstd needs the zstd
command).
"""

from __future__ import annotations

import argparse
import gzip
import random
import subprocess
from pathlib import Path
from typing import TextIO

HEADER = """\
-- MariaDB dump 10.19  Distrib 10.11.6-MariaDB, for debian-linux-gnu (x86_64)
--
-- Host: localhost    Database: shop
-- ------------------------------------------------------
-- (written by knoblab's scripts/shop_dump.py)
/*!40101 SET @OLD_CHARACTER_SET_CLIENT=@@CHARACTER_SET_CLIENT */;
/*!40101 SET NAMES utf8mb4 */;
/*!40014 SET @OLD_UNIQUE_CHECKS=@@UNIQUE_CHECKS, UNIQUE_CHECKS=0 */;
/*!40014 SET @OLD_FOREIGN_KEY_CHECKS=@@FOREIGN_KEY_CHECKS, FOREIGN_KEY_CHECKS=0 */;
/*!40101 SET @OLD_SQL_MODE=@@SQL_MODE, SQL_MODE='NO_AUTO_VALUE_ON_ZERO' */;

CREATE DATABASE /*!32312 IF NOT EXISTS*/ `shop` /*!40100 DEFAULT CHARACTER SET utf8mb4 */;

USE `shop`;
"""
TABLES = {
    "customers": """\
CREATE TABLE `customers` (
  `id` int(11) NOT NULL,
  `name` varchar(60) NOT NULL,
  `country` char(2) NOT NULL,
  PRIMARY KEY (`id`),
  KEY `country` (`country`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;""",
    "products": """\
CREATE TABLE `products` (
  `id` int(11) NOT NULL,
  `title` varchar(100) NOT NULL,
  `price` decimal(10,2) NOT NULL,
  PRIMARY KEY (`id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;""",
    "orders": """\
CREATE TABLE `orders` (
  `id` int(11) NOT NULL AUTO_INCREMENT,
  `customer` int(11) NOT NULL,
  `product` int(11) NOT NULL,
  `quantity` int(11) NOT NULL,
  `placed` datetime NOT NULL,
  `note` varchar(200) NOT NULL DEFAULT '',
  PRIMARY KEY (`id`),
  KEY `customer_placed` (`customer`,`placed`),
  KEY `placed` (`placed`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;""",
    "stock_moves": """\
CREATE TABLE `stock_moves` (
  `id` int(11) NOT NULL AUTO_INCREMENT,
  `product` int(11) NOT NULL,
  `delta` int(11) NOT NULL,
  PRIMARY KEY (`id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;""",
}
OBJECTS = """\
DELIMITER ;;
/*!50003 CREATE*/ /*!50017 DEFINER=`shop_app`@`%`*/ /*!50003 TRIGGER `orders_stock` AFTER \
INSERT ON `orders` FOR EACH ROW INSERT INTO stock_moves (product, delta) \
VALUES (NEW.product, -NEW.quantity) */;;
DELIMITER ;

DELIMITER ;;
CREATE DEFINER=`shop_app`@`%` PROCEDURE `place_order`(IN who INT, IN what INT, IN how_many INT)
    SQL SECURITY DEFINER
BEGIN
  INSERT INTO orders (customer, product, quantity, placed) VALUES (who, what, how_many, NOW());
END ;;
DELIMITER ;

/*!50001 DROP VIEW IF EXISTS `revenue_by_country`*/;
/*!50001 CREATE ALGORITHM=UNDEFINED */
/*!50013 DEFINER=`reporting`@`localhost` SQL SECURITY DEFINER */
/*!50001 VIEW `revenue_by_country` AS select `c`.`country` AS `country`,\
sum(`o`.`quantity` * `p`.`price`) AS `revenue` from ((`orders` `o` join `customers` `c` \
on(`c`.`id` = `o`.`customer`)) join `products` `p` on(`p`.`id` = `o`.`product`)) \
group by `c`.`country` */;

/*!40014 SET FOREIGN_KEY_CHECKS=@OLD_FOREIGN_KEY_CHECKS */;
/*!40014 SET UNIQUE_CHECKS=@OLD_UNIQUE_CHECKS */;
-- Dump completed
"""
COUNTRIES = ("DE", "FR", "FI", "SE", "US", "GB", "ES", "IT", "PL", "NL")
STATEMENT_BYTES = 1 << 20  # mariadb-dump's extended INSERTs are about this long


def _rows(out: TextIO, table: str, rows: list[str]) -> None:
    out.write(f"\nDROP TABLE IF EXISTS `{table}`;\n{TABLES[table]}\n\n")
    out.write(f"LOCK TABLES `{table}` WRITE;\n/*!40000 ALTER TABLE `{table}` DISABLE KEYS */;\n")
    batch: list[str] = []
    size = 0
    for row in rows:
        batch.append(row)
        size += len(row) + 1
        if size >= STATEMENT_BYTES:
            out.write(f"INSERT INTO `{table}` VALUES {','.join(batch)};\n")
            batch, size = [], 0
    if batch:
        out.write(f"INSERT INTO `{table}` VALUES {','.join(batch)};\n")
    out.write(f"/*!40000 ALTER TABLE `{table}` ENABLE KEYS */;\nUNLOCK TABLES;\n")


def write(out: TextIO, orders: int) -> None:
    draw = random.Random(20)
    customers, products = max(orders // 20, 10), 500
    out.write(HEADER)
    _rows(out, "customers", [f"({i},'customer {i}','{draw.choice(COUNTRIES)}')"
                             for i in range(1, customers + 1)])
    _rows(out, "products", [f"({i},'product {i}',{draw.randint(100, 99999) / 100:.2f})"
                            for i in range(1, products + 1)])
    _rows(out, "orders", [
        f"({i},{draw.randint(1, customers)},{draw.randint(1, products)},{draw.randint(1, 5)},"
        f"'2025-{draw.randint(1, 12):02d}-{draw.randint(1, 28):02d} "
        f"{draw.randint(0, 23):02d}:{draw.randint(0, 59):02d}:00','')"
        for i in range(1, orders + 1)])
    _rows(out, "stock_moves", [])
    out.write("\n" + OBJECTS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--orders", type=int, default=300_000)
    args = parser.parse_args()
    path: Path = args.path
    if path.suffix == ".gz":
        with gzip.open(path, "wt", encoding="utf-8") as out:
            write(out, args.orders)
    elif path.suffix == ".zst":
        plain = path.with_suffix("")
        with plain.open("w", encoding="utf-8") as out:
            write(out, args.orders)
        subprocess.run(["zstd", "-q", "-f", "--rm", str(plain), "-o", str(path)], check=True)
    else:
        with path.open("w", encoding="utf-8") as out:
            write(out, args.orders)
    print(f"{path}: {path.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
