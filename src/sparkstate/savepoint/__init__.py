"""savepoint"""
